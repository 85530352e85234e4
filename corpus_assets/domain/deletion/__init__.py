"""Deletion requests, their tombstones (lineage resolution) and the purge of every stored copy."""
