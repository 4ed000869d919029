"""A key's priority band through the API: at most its tenant's highest band (a staff setting), refused with 400
naming the field and nothing written; the snapshot carries the key's band, the tenant's weight and each
service's saturation bound."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.gateway.models import InferenceKey, Upstream
from apps.gateway.snapshot import build_snapshot
from apps.telemetry.models import SeriesPoint
from tests.factories import InferenceServiceFactory

URL = "/api/v1/inference-keys/"
pytestmark = pytest.mark.django_db


def test_a_key_band_is_capped_by_the_tenants_highest_which_staff_set(api, owner_a, staff):
    owner = api("owner_a")
    response = owner.post(URL, {"tenant": "alpha", "name": "vip", "priority": 1}, format="json")
    assert response.status_code == 400 and "priority" in response.json()
    assert "highest band is 0" in str(response.json()["priority"])
    response = owner.post(URL, {"tenant": "alpha", "name": "low", "priority": -21}, format="json")
    assert response.status_code == 400 and "priority" in response.json()
    assert not InferenceKey.objects.exists()
    # Only staff raise the tenant's highest band, and weigh its share.
    body = {"tenant": "alpha", "max_priority": 10, "fair_share_weight": 3}
    assert owner.post("/api/v1/tenant-limits/", body, format="json").status_code == 403
    assert api("staff").post("/api/v1/tenant-limits/", body, format="json").status_code == 201
    response = owner.post(URL, {"tenant": "alpha", "name": "vip", "priority": 10}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["priority"] == 10
    key = InferenceKey.objects.get()
    snapshot = build_snapshot()
    assert snapshot["keys"][key.key_hash]["priority"] == 10
    assert snapshot["tenants"][str(key.tenant_id)]["weight"] == 3


def test_the_saturation_bound_is_ready_engines_times_their_sequences(tenant_a):
    set_seqs = InferenceServiceFactory(tenant=tenant_a, name="set", engine_settings={"max_num_seqs": 8},
                                       pools=[{"role": "engine", "replicas": 3, "gpu_type": "l4-24gb"}])
    default = InferenceServiceFactory(tenant=tenant_a, name="default",
                                      pools=[{"role": "engine", "replicas": 2, "gpu_type": "l4-24gb"}])
    asleep = InferenceServiceFactory(tenant=tenant_a, name="asleep")
    for service, ready in ((set_seqs, 3), (default, 2), (asleep, 0)):
        Upstream.objects.create(service=service, ready_engines=ready, seen_at=timezone.now(), endpoints=[])
    bounds = {s["name"]: s["max_outstanding"] for s in build_snapshot()["services"]}
    # 3 engines x 8; 2 engines x vLLM's 256 on a 24 GB L4; no engine ready, no bound.
    assert bounds == {"set": 24, "default": 512, "asleep": None}


def test_the_snapshot_carries_each_services_latest_recent_engine_signals(tenant_a):
    busy = InferenceServiceFactory(tenant=tenant_a, name="busy")
    stale = InferenceServiceFactory(tenant=tenant_a, name="stale")
    now = timezone.now()
    SeriesPoint.objects.create(service=busy, time=now - timedelta(seconds=20), waiting=0, kv_usage=0.2)
    SeriesPoint.objects.create(service=busy, time=now - timedelta(seconds=5), waiting=4, kv_usage=0.93)
    SeriesPoint.objects.create(service=busy, role="decode", time=now, waiting=0, kv_usage=0.1)  # a pool's, not used
    SeriesPoint.objects.create(service=stale, time=now - timedelta(minutes=5), waiting=9, kv_usage=0.99)
    signals = {s["name"]: (s["engine_waiting"], s["kv_usage"]) for s in build_snapshot()["services"]}
    # The newest service-wide point of the last minute; a point five minutes old says nothing now.
    assert signals == {"busy": (4, 0.93), "stale": (None, None)}
