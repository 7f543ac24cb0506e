"""The HTTP face: routes, API keys, response relays and the typed state a route reads."""
