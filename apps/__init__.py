"""Django apps, one per domain (tenancy, catalog, clusters, serving, telemetry, autoscaling, web)."""
