"""Shared fixtures. Tests run against real PostgreSQL (DATABASE_URL) and, where marked, a real broker."""
