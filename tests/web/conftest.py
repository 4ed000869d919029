"""Fixtures for the dashboard tests: kubesim-backed services (from the telemetry fixtures), series rows
written at chosen times, and a logged-in browser session per actor."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.telemetry.models import SeriesPoint
from tests.factories import PASSWORD
from tests.telemetry.conftest import deploy, sim, sim_cluster  # noqa: F401 (fixtures shared with telemetry tests)


@pytest.fixture
def login(client):
    """login(user) → the Django test client with that user's session."""

    def as_user(user):
        assert client.login(username=user.username, password=PASSWORD)
        return client

    return as_user


def point(service, seconds_ago: float, role: str = "", **figures) -> SeriesPoint:
    """A raw series row `seconds_ago` before now with the given figures."""
    return SeriesPoint.objects.create(
        service=service, role=role, time=timezone.now() - timedelta(seconds=seconds_ago), **figures
    )
