"""The autoscaling domain."""
