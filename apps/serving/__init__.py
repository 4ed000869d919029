"""The serving domain."""
