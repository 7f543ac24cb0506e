"""The engines: the pool, the HTTP client to them, its transport and discovery."""
