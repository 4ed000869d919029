"""The migrated schema: every foreign key can be looked up through an index.

A foreign key without an index of its own (`db_index=False`, where a composite index already starts with
the column) is fine; one that no index starts with makes every cascade delete and every lookup by the
parent a scan of the child table.
"""

import pytest
from django.apps import apps
from django.db import connection

pytestmark = pytest.mark.django_db


def project_foreign_keys():
    for model in apps.get_models():
        if not model.__module__.startswith("apps.") or not model._meta.managed:
            continue
        for field in model._meta.local_fields:
            if field.many_to_one or field.one_to_one:
                yield model._meta.db_table, field.column


def leading_columns(table: str) -> set[str]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {c["columns"][0] for c in constraints.values() if (c["index"] or c["unique"]) and c["columns"]}


def test_every_foreign_key_leads_an_index():
    keys = list(project_foreign_keys())
    assert ("telemetry_seriespoint", "service_id") in keys  # the walk sees the models it is meant to
    unindexed = [(table, column) for table, column in keys if column not in leading_columns(table)]
    assert unindexed == []


def test_the_series_table_keeps_one_index_per_purpose():
    """The series table's foreign key is served by the unique constraint's first column, not a copy."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "telemetry_seriespoint")
    indexed = sorted(tuple(c["columns"]) for c in constraints.values() if c["index"] or c["unique"])
    assert indexed == [("id",), ("resolution", "time"), ("service_id", "role", "resolution", "time")]
