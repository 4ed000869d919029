"""Fixtures of the autoscaling tests: the dashboard's logged-in client."""

from tests.web.conftest import login  # noqa: F401 (shared fixture)
