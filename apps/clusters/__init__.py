"""The clusters domain."""
