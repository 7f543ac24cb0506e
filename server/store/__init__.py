"""The rehearsal store: Redis or in-process, its keys and how it is opened."""
