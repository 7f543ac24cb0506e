"""Rehearsal at the edge: the service around the core planner, its engine port and commit writer."""
