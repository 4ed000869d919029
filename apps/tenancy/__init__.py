"""The tenancy domain."""
