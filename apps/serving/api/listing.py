"""The list action of the services API: the detail serializer's output, built from plain rows.

Through `InferenceServiceSerializer`, most of a 100-item page's time went to model instances (a service,
its tenant, cluster, model, runtime and pools, and a related manager per instance) and to DRF's per-field
work, not to SQL (docs/scale.md). The list reads the same columns as rows (queries the ORM compiles once
per process, `_Compiled`) and assembles each item with plain code; retrieve, create, update and the
actions keep the serializer, which stays the
definition of the output: `tests/serving/test_service_list_rows.py` holds every list item equal to the
detail response of the same service, key order included.

A page is chosen on the primary key and the ordering columns only (`page_keys`: no joins, no prefetch),
which PostgreSQL reads from the `(tenant, name)` index alone at any OFFSET (the index includes the id);
the page's rows are then read by primary key (`service_rows`), in a fixed number of queries whatever the
page size.
"""

from __future__ import annotations

import functools
from collections import defaultdict

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db import connection, models
from django.db.models import CharField, F, Func, IntegerField, Lookup, OuterRef, TextField, Value
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import DateTimeField
from rest_framework.settings import api_settings

from apps.catalog.engines import EngineSettings, EngineSettingsError
from apps.catalog.models import Adapter, Model
from apps.serving.admission import admission_summary
from apps.serving.api.serializers import InferenceServiceSerializer, PoolSerializer
from apps.serving.capacity import draft_of, spec_warnings
from apps.serving.disclosure import conditions_for
from apps.serving.models import POOL_SPEC_FIELDS, InferenceService, Pool
from apps.serving.rendering.spec import PoolSpec
from apps.tenancy.models import PriorityClass, Tenant

FIELDS = tuple(InferenceServiceSerializer.Meta.fields)
POOL_FIELDS = tuple(PoolSerializer.Meta.fields)
POOL_SPEC = ("role", *POOL_SPEC_FIELDS)  # what a pool contributes to its warnings (PoolSpec)
DATETIME_FIELDS = tuple(field.name for field in InferenceService._meta.concrete_fields
                        if field.name in FIELDS and isinstance(field, models.DateTimeField))
# The serializer's relations to one object, as columns: a slug field through the relation, else the id.
# Every field not handled in `_columns` is a column whose value the serializer passes through unchanged
# (integers, strings, choices, JSON).
RELATED = {
    name: f"{name}__{field.slug_field}" if isinstance(field, serializers.SlugRelatedField) else f"{name}_id"
    for name, field in InferenceServiceSerializer._declared_fields.items()
    if isinstance(field, serializers.RelatedField)
}
COMPUTED = ("pools", "warnings")  # filled in after the row query (NULL in it)
MODEL = FIELDS.index("model")


def page_keys(queryset):
    """The list's queryset reduced to what choosing a page needs: `values()` rows of the primary key (`pk`)
    and the ordering columns (a cursor's position is made of them), without joins or prefetches."""
    ordering = queryset.query.order_by or queryset.model._meta.ordering
    columns = [name.lstrip("-") for name in ordering if isinstance(name, str) and "__" not in name]
    return queryset.select_related(None).prefetch_related(None).values(*dict.fromkeys(["pk", *columns]))


def service_rows(ids: list[int], user) -> list[dict]:
    """The services `ids` (in that order) as InferenceServiceSerializer renders them for `user`, in three
    queries: their pools, the services (adapters included), and their catalog models (capacity warnings)."""
    text, in_sql = _datetime_text()
    pools: dict[int, list[dict]] = defaultdict(list)
    for values in _POOLS.run(ids):
        pools[values[0]].append(dict(zip(POOL_FIELDS, values[1:], strict=True)))
    # One column per serializer field, in its order, then the runtime's engine (for the warnings).
    rows = {row[0]: row for row in (_ROWS_UTC if in_sql else _ROWS).run(ids)}
    catalog = Model.objects.filter(_in("pk", list({row[MODEL] for row in rows.values()})))
    warnings = _Warnings({model.pk: model for model in catalog.order_by()})
    items, platform_class = [], functools.cache(PriorityClass.objects.platform_default)
    for pk in ids:
        row = rows.get(pk)
        if row is None:  # deleted between choosing the page and reading it
            continue
        item = dict(zip(FIELDS, row, strict=False))  # the engine, past the last field, is left out
        for name in DATETIME_FIELDS:
            item[name] = text(item[name])
        item["conditions"] = conditions_for(user, item["conditions"])
        item["pools"] = pools.get(pk, [])
        item["warnings"] = warnings.of(item, row[-1])
        item["admission"] = admission_summary(item["admission"])
        if item["priority_class"] is None:
            item["priority_class"] = getattr(platform_class(), "name", None)
        items.append(item)
    return items


def _columns(in_sql: bool) -> tuple:
    """The row query's select list: the serializer's fields in its order, each as the serializer writes it
    where PostgreSQL can (the uid, the time stamps in UTC), NULL for those computed afterwards, then the
    runtime's engine."""
    adapters = InferenceService.adapters.through.objects.filter(inferenceservice_id=OuterRef("pk")).order_by(
        *(_through(name) for name in Adapter._meta.ordering), "adapter_id").values("adapter_id")
    special = {
        **{name: F(column) for name, column in RELATED.items()},
        # The service's class, else its tenant's default; the platform default is filled in after the query.
        "priority_class": Coalesce(F("priority_class__name"), F("tenant__default_priority_class__name")),
        "adapters": ArraySubquery(adapters),
        "uid": Cast("uid", TextField()),
        **{name: _UtcText(name) if in_sql else F(name) for name in DATETIME_FIELDS},
        **{name: Value(None, output_field=IntegerField()) for name in COMPUTED},
    }
    return (*(special.get(name) or F(name) for name in FIELDS), F("runtime__engine"))


class _Compiled:
    """A `values_list()` query of the ORM for a page of ids, compiled to SQL once per process and run with
    each page's ids (its one parameter) on a plain cursor: compiling these two queries anew and iterating
    their results through the ORM was about a fifth of a page's instructions. Its columns are expressions
    all (so the select list keeps their order) or fields all; the JSON ones are converted as their model
    field converts them. The ORM stays the author of the SQL."""

    def __init__(self, build, json_columns: tuple[tuple[int, models.JSONField], ...] = ()):
        self.build = build  # ids -> the values_list() queryset
        self.json_columns = json_columns  # (position, model field) of the JSON columns

    @functools.cached_property
    def sql(self) -> str:
        sql, params = self.build([]).query.sql_with_params()
        if list(params) != [[]]:
            raise ValueError(f"the ids must be the only parameter of {sql!r}, not {params!r}")
        return sql

    def run(self, ids: list[int]) -> list:
        with connection.cursor() as cursor:
            cursor.execute(self.sql, [ids])
            rows = cursor.fetchall()
        if not self.json_columns:
            return rows
        converted = []
        for row in rows:
            row = list(row)
            for i, field in self.json_columns:
                row[i] = field.from_db_value(row[i], None, connection)
            converted.append(row)
        return converted


def _service_query(in_sql: bool):
    return lambda ids: InferenceService.objects.filter(_in("pk", ids)).order_by().values_list(*_columns(in_sql))


JSON_COLUMNS = tuple((FIELDS.index(field.name), field) for field in InferenceService._meta.concrete_fields
                     if field.name in FIELDS and isinstance(field, models.JSONField))
_ROWS_UTC = _Compiled(_service_query(in_sql=True), JSON_COLUMNS)
_ROWS = _Compiled(_service_query(in_sql=False), JSON_COLUMNS)
_POOLS = _Compiled(lambda ids: Pool.objects.filter(_in("service_id", ids)).values_list("service_id", *POOL_FIELDS))


class _AnyOf(Lookup):
    """`column = ANY(%s)` with the ids as one array parameter. `__in` spells one placeholder per id, which
    psycopg splits and quotes one by one on every query (a page's share of that was as large as the JSON
    decoding of its rows), and makes a new statement text for every page size."""

    prepare_rhs = False

    def as_sql(self, compiler, connection):
        column, params = compiler.compile(self.lhs)
        return f"{column} = ANY(%s)", [*params, list(self.rhs)]


def _in(column: str, ids: list[int]) -> _AnyOf:
    return _AnyOf(F(column), ids)


def _through(ordering: str) -> str:
    """An Adapter ordering name as seen from the service-adapter table (`name` → `adapter__name`)."""
    descending = ordering.startswith("-")
    return ("-" if descending else "") + "adapter__" + ordering.lstrip("-")


class _UtcText(Func):
    """A timestamptz written by PostgreSQL in UTC as `YYYY-MM-DDTHH:MI:SS.ffffff` (six digits even when zero):
    parsing it into a datetime and writing it back out in Python was a tenth of a page's CPU time."""

    template = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
    output_field = CharField()


def _utc_text(value: str | None) -> str | None:
    """What DRF's DateTimeField writes for the UTC instant `_UtcText` wrote: no fraction when it is zero."""
    if value is None:
        return None
    return (value[:-7] if value.endswith(".000000") else value) + "Z"


def _datetime_text():
    """(function, in_sql): how the page's time stamps become text as DRF's DateTimeField.to_representation
    writes them. In UTC with ISO 8601 (the settings here) PostgreSQL writes them (`in_sql`); in another
    current time zone the datetimes are converted in Python with the zone read once per page; with another
    format setting DRF's own field does it."""
    if not settings.USE_TZ or (api_settings.DATETIME_FORMAT or "").lower() != ISO_8601:
        return DateTimeField().to_representation, False
    zone = timezone.get_current_timezone()
    if timezone.get_current_timezone_name() == "UTC":
        return _utc_text, True

    def text(value):
        if not value:
            return None
        value = value.astimezone(zone).isoformat()
        return value[:-6] + "Z" if value.endswith("+00:00") else value

    return text, False


class _Warnings:
    """`spec_warnings` of the page's services, computed once per distinct spec: the key holds every input
    (the model, the engine, the stored engine settings and each pool's role and spec fields). The stored
    settings are keyed by their repr, which is equal only for equal JSON values."""

    def __init__(self, models: dict[int, Model]):
        self.models = models
        self.seen: dict[tuple, list[str]] = {}

    def of(self, item: dict, engine: str) -> list[str]:
        specs = tuple(tuple(pool[name] for name in POOL_SPEC) for pool in item["pools"])
        key = (item["model"], item["tenant"], engine, repr(item["engine_settings"]), specs)
        found = self.seen.get(key)
        if found is None:
            found = self.seen[key] = self.compute(item, engine, specs)
        return list(found)

    def compute(self, item: dict, engine: str, specs: tuple[tuple, ...]) -> list[str]:
        try:
            engine_settings = EngineSettings.from_dict(item["engine_settings"])
        except EngineSettingsError:
            return []
        pools = [PoolSpec(**dict(zip(POOL_SPEC, spec, strict=True))) for spec in specs]
        draft = None
        if engine_settings.speculative_model:  # the row names its tenant by slug; the draft is the tenant's to name
            draft = draft_of(Tenant.objects.filter(slug=item["tenant"]).values_list("pk", flat=True).first(),
                             engine_settings)
        return spec_warnings(self.models[item["model"]], engine, engine_settings, pools, draft)
