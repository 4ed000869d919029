"""Set-up shared by the bench scripts that need a database of their own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def throwaway_database(prefix: str = "bench_") -> Iterator[None]:
    """Run the block against a fresh `<prefix><database>` database, dropped afterwards even on failure.

    The `bench_` default keeps a concurrent pytest run (which uses `test_<database>`) from being clobbered.
    """
    from django.db import connection

    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{prefix}{old_name}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
