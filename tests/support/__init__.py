"""Shared test support: real processes on loopback (twin, gateway, redis-server)."""
