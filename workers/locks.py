"""Claims that live in PostgreSQL, so any number of workers can run: a session-level advisory lock is
held on the worker's own connection and dies with it (a killed worker releases its claims)."""

from __future__ import annotations

from contextlib import contextmanager

from django.db import connection


@contextmanager
def advisory_lock(namespace: int, key: int):
    """Yield True when this process now holds lock (namespace, key), False when another session does."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
        held = cursor.fetchone()[0]
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])
