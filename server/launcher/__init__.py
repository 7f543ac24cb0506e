"""Command lines that start things: the gateway, engines and their process groups."""
