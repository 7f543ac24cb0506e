"""Clients of the gateway: the `rehearsal-gateway` CLI, the Python client, the example agent."""
