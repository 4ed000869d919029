"""The test database as a URL, for the processes a test starts (workers, the gateway's metering)."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def database_url_of_test_db() -> str:
    """A DATABASE_URL for the database this test run uses (pytest-django's test database)."""
    return url_of(connection.settings_dict)


def url_of(s: dict) -> str:
    """A DATABASE_URL for a Django database settings dict: the host is percent-encoded, so the embedded
    PostgreSQL's socket directory (a path) works as well as a TCP host."""
    auth = quote(s["USER"] or "", safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s.get("PASSWORD") else "")
    host = quote(s["HOST"] or "", safe="")
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{s['NAME']}"
