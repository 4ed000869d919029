"""Fixtures for the dashboard and portal tests: kubesim-backed services (from the telemetry fixtures), series
rows written at chosen times, a logged-in test client per actor, and a logged-in headless Chromium page per
actor (`browser_page`), in a browser context of its own (`browser_contexts`) on the worker's one Chromium
(`chromium`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
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


@pytest.fixture(scope="session")
def chromium(live_server):
    """One Playwright driver and one headless Chromium per test process (each xdist worker), started when a test
    first asks for a page: (browser, Playwright's event loop). Each test gets browser contexts of its own
    (`browser_contexts`), so no cookie, storage or cache passes from one test to the next; starting the driver and
    the browser once instead of per test saves about a second of CPU per browser test (docs/tests.md)."""
    playwright = sync_playwright().start()
    loop = asyncio.get_running_loop()  # Playwright's sync API marks its loop as running in this thread
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    # Between browser tests the loop is marked idle again, so the tests that follow on this worker see the thread
    # as Playwright-free (no running loop: Django's async-unsafe guard and asyncio.run() behave as without it).
    asyncio._set_running_loop(None)
    yield browser, loop
    # Torn down before the live server (set up first, as this fixture asks for it), so no connection of the
    # browser keeps one of the server's threads, and its database connection, alive at the end of the run.
    asyncio._set_running_loop(loop)
    browser.close()
    playwright.stop()


@pytest.fixture
def browser_contexts(chromium, live_server, monkeypatch):
    """new_context(**options) → a new browser context of the worker's Chromium, closed when the test ends."""
    browser, loop = chromium
    # Playwright's sync API runs an event loop in this thread; the test still writes rows through the ORM.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    asyncio._set_running_loop(loop)  # as inside `with sync_playwright()`, which the sync calls expect
    contexts = []

    def new_context(**context_options):
        context = browser.new_context(**context_options)
        contexts.append(context)
        return context

    try:
        yield new_context
        for context in contexts:
            context.close()
        settle_live_server_queries()
    finally:
        # Database work done while Playwright's loop is marked running has connections of its own (Django keeps
        # them apart from the thread's in async code); close them while they are still the ones seen, so the
        # test database can be dropped at the end of the run.
        connections.close_all()
        asyncio._set_running_loop(None)


def settle_live_server_queries(timeout: float = 10.0) -> None:
    """Wait (at most `timeout`) until no other connection to the test database runs a statement or holds a
    transaction: a request the page sent just before its context closed (a chart's poll) goes on in a live-server
    thread, and its query against the flush's TRUNCATE of every table once deadlocked, failing the flush and
    leaving rows to the worker's next test."""
    deadline = time.monotonic() + timeout
    with connections["default"].cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')")
            if cursor.fetchone()[0] == 0:
                return
            time.sleep(0.05)


@pytest.fixture
def browser_page(browser_contexts, live_server):
    def as_user(user, **context_options):
        """A new page signed in as `user`, in its own browser context (its own cookies)."""
        context = browser_contexts(**context_options)
        client = Client()
        assert client.login(username=user.username, password=PASSWORD)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
        return context.new_page()

    return as_user
