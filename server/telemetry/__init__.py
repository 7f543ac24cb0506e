"""Metrics, request logs and the clock of time spent waiting."""
