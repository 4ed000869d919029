"""The telemetry domain."""
