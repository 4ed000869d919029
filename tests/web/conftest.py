"""Fixtures for the dashboard and portal tests: kubesim-backed services (from the telemetry fixtures), series
rows written at chosen times, a logged-in test client per actor, and a logged-in headless Chromium page per
actor (`browser_page`)."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from django.utils import timezone
from playwright.sync_api import sync_playwright

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


# Debian's chromium (installed by .ci/run and `make test`), or CHROMIUM=/path/to/chrome.
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser_page(live_server, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the test still writes rows through the ORM.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

        def as_user(user, **context_options):
            """A new page signed in as `user`, in its own browser context (its own cookies)."""
            context = browser.new_context(**context_options)
            client = Client()
            assert client.login(username=user.username, password=PASSWORD)
            cookie = client.cookies[settings.SESSION_COOKIE_NAME]
            context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
            return context.new_page()

        yield as_user
        browser.close()
        # Work done while Playwright's loop runs may open its own database connection; close it so the
        # test database can be dropped at the end of the run.
        connections.close_all()
