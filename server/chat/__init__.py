"""The front door of a chat completion: decode, then pass through or rehearse."""
