"""The web domain."""
