"""API-server extensions of this package (no job logic)."""
