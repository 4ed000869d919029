"""The service list is built from plain rows (apps/serving/api/listing.py); every item must be exactly what
the detail endpoint's serializer renders for the same service and the same caller, key order included."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.catalog.models import Adapter
from apps.serving.models import InferenceService
from tests.factories import AdapterFactory, ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory

CONDITIONS = [
    {"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": "admission webhook at 10.0.0.7 said no",
     "lastTransitionTime": "2026-01-02T03:04:05Z"},
    {"type": "Progressing", "status": "True", "reason": "Scheduled", "message": "2 of 3 replicas scheduled"},
]


@pytest.fixture
def services(tenant_a, tenant_b):
    """Services that differ in every way the output can: pools, adapters, settings, status, time stamps."""
    cluster = ClusterFactory(name="gpu-east")
    model = ModelFactory(name="llama-8b")
    big = ModelFactory(name="llama-70b", parameters_billions=70.6, layers=80, hidden_size=8192, attention_heads=64)
    vllm, sglang = RuntimeFactory(name="vllm"), RuntimeFactory(name="sglang", engine="sglang", image="lmsysorg/sglang")
    # By name the adapters are in neither id order, so the order of `adapters` is tested.
    mid, zeta, alpha = (AdapterFactory(name=name, base_model=model) for name in ("mid-lora", "zeta-lora", "alpha-lora"))
    made = [
        InferenceServiceFactory(tenant=tenant_a, name="chat", cluster=cluster, model=model, runtime=vllm),
        InferenceServiceFactory(
            tenant=tenant_a, name="split", cluster=cluster, model=model, runtime=vllm, deployment_mode="pd_disaggregated",
            engine_settings={"max_model_len": 8192, "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8"},
            autoscaling={"autoscaler": "builtin", "targets": {"queue_per_replica": 2.5}},
            pools=[{"role": "prefill", "replicas": 2, "max_replicas": 4, "gpu_type": "a100-sxm-80gb"},
                   {"role": "decode", "replicas": 1, "gpus_per_replica": 2}],
        ),
        # Does not fit one GPU: "Does not fit" warnings.
        InferenceServiceFactory(tenant=tenant_a, name="too-big", cluster=cluster, model=big, runtime=sglang),
        # Engine settings that cannot be read: no warnings rather than an error.
        InferenceServiceFactory(tenant=tenant_b, name="odd-settings", cluster=cluster, model=model, runtime=vllm,
                                engine_settings={"max_model_len": "long", "unknown": [1, {"ü": None}]}),
        InferenceServiceFactory(tenant=tenant_b, name="no-pools", cluster=cluster, model=model, runtime=sglang,
                                pools=[]),
    ]
    made[0].adapters.set([zeta, alpha, mid])
    made[3].adapters.set([alpha])
    InferenceService.objects.filter(pk=made[0].pk).update(
        phase="Degraded", conditions=CONDITIONS, ready_replicas=1, observed_generation=1, endpoint="http://chat.a:8000",
        deletion_requested_at=datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC), version=7, generation=3,
        created=datetime(2026, 1, 1, tzinfo=UTC),  # no microseconds: ISO 8601 without a fraction
    )
    return made


def detail(client, pk: int) -> dict:
    response = client.get(f"/api/v1/services/{pk}/")
    assert response.status_code == 200, response.content
    return response.json()


def listed(client, query: str) -> list[dict]:
    response = client.get(f"/api/v1/services/?{query}")
    assert response.status_code == 200, response.content
    return response.json()["results"]


def as_text(item: dict) -> str:
    return json.dumps(item, ensure_ascii=False)  # dicts keep the order the response had


@pytest.mark.parametrize("actor", ["staff", "owner_a"])
@pytest.mark.parametrize("query", ["page_size=50", "page_size=50&cursor=", "page_size=50&ordering=-updated"])
def test_every_list_item_is_the_detail_response_of_its_service(api, services, actor, query):
    client = api(actor)
    items = listed(client, query)
    visible = [s for s in services if actor == "staff" or s.tenant.slug == "alpha"]
    assert sorted(item["id"] for item in items) == sorted(s.pk for s in visible)
    for item in items:
        assert as_text(item) == as_text(detail(client, item["id"]))


def test_the_list_shows_what_the_reconciler_and_the_capacity_rules_say(api, services):
    """The cases the fixture sets up are present in the output (so the comparison above covers them)."""
    alpha, mid, zeta = (Adapter.objects.get(name=name) for name in ("alpha-lora", "mid-lora", "zeta-lora"))
    by_name = {item["name"]: item for item in listed(api("owner_a"), "page_size=50")}
    chat = by_name["chat"]
    assert chat["adapters"] == [alpha.pk, mid.pk, zeta.pk]  # by name
    assert chat["deletion_requested_at"] == "2026-03-04T05:06:07.890123Z"
    assert chat["created"] == "2026-01-01T00:00:00Z"
    assert chat["conditions"][0]["message"] != CONDITIONS[0]["message"]  # a tenant reads the summary
    assert [p["role"] for p in by_name["split"]["pools"]] == ["decode", "prefill"]
    assert any(w.startswith("Does not fit") for w in by_name["too-big"]["warnings"])
    staff_view = {item["name"]: item for item in listed(api("staff"), "page_size=50")}
    assert staff_view["chat"]["conditions"] == CONDITIONS
    assert staff_view["odd-settings"]["warnings"] == [] and staff_view["no-pools"]["pools"] == []


def test_time_stamps_follow_the_current_time_zone_like_the_serializer(api, services):
    client = api("staff")
    with timezone.override("Asia/Kolkata"):
        items = listed(client, "page_size=50")
        assert items[0]["created"].endswith("+05:30")
        for item in items:
            assert as_text(item) == as_text(detail(client, item["id"]))


def test_a_non_iso_datetime_format_setting_is_followed_too(api, services, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DATETIME_FORMAT": "%d.%m.%Y %H:%M"}
    client = api("staff")
    items = listed(client, "page_size=50")
    assert "." in items[0]["created"] and "T" not in items[0]["created"]
    for item in items:
        assert as_text(item) == as_text(detail(client, item["id"]))


def test_a_page_costs_the_same_queries_at_any_size_and_depth(api, tenant_a, staff):
    cluster, model, runtime = ClusterFactory(), ModelFactory(), RuntimeFactory()
    lora = AdapterFactory(base_model=model)
    for i in range(12):
        service = InferenceServiceFactory(tenant=tenant_a, name=f"svc-{i:02d}", cluster=cluster, model=model,
                                          runtime=runtime, pools=[{"role": "prefill"}, {"role": "decode"}])
        service.adapters.add(lora)
    client = api("staff")
    client.get("/api/v1/services/?page_size=1")  # per-process caches (content types)
    counts = set()
    for query in ("page_size=2", "page_size=10", "page_size=2&page=6", "page_size=10&cursor="):
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(f"/api/v1/services/?{query}").status_code == 200
        counts.add((query.endswith("cursor="), len(ctx.captured_queries)))
    assert len(counts) == 2  # one count for page numbers (which COUNT), one for cursors


def test_cursor_pages_ordered_by_a_time_stamp_cover_every_service_once(api, services):
    """The cursor of a page of rows is made from the last row's ordering values (a datetime here)."""
    client = api("staff")
    url, seen = "/api/v1/services/?cursor=&page_size=2&ordering=-created", []
    while url:
        body = client.get(url).json()
        seen += [item["id"] for item in body["results"]]
        url = body["next"]
    # Newest first; the primary key breaks ties.
    stamps = dict(InferenceService.objects.values_list("pk", "created"))
    assert seen == sorted(stamps, key=lambda pk: (-stamps[pk].timestamp(), pk))
