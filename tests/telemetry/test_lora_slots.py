"""vLLM's LoRA slots (`vllm:lora_requests_info`) read from an exposition, kept with the pod's scrape, and written
into the gateway's snapshot per endpoint, where the balancer's LoRA affinity reads them (tests/gateway/
test_balance.py); the real engine's exposition reads the same way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.gateway.models import Upstream
from apps.gateway.snapshot import build_snapshot
from apps.telemetry.exposition import parse_snapshot
from apps.telemetry.lora import lora_slots, stored_lora_slots
from apps.telemetry.models import PodStat
from tests.factories import InferenceServiceFactory

# vLLM's shape: one series per label set the scheduler reported, valued with when it reported it.
EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="tiny-sql",waiting_lora_adapters=""} 1.7653e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="tiny-sql,tiny-chat",waiting_lora_adapters="math"} 1.7654e+09
"""


def test_the_latest_series_names_the_running_and_waiting_adapters_and_max_lora():
    snapshot = parse_snapshot(EXPOSITION)
    expected = {"running": ["tiny-chat", "tiny-sql"], "waiting": ["math"], "max_lora": 2}
    assert lora_slots((dict(key), value) for key, value in snapshot.gauges["lora_requests_info"].items()) == expected
    # As telemetry stores the pod's scrape.
    assert stored_lora_slots(snapshot.to_dict()["gauges"]["lora_requests_info"]) == expected
    assert stored_lora_slots(None) is None  # an engine without --enable-lora


@pytest.mark.django_db
def test_the_gateways_snapshot_carries_each_fresh_pods_slots(tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="lora")
    Upstream.objects.create(service=service, ready_engines=2, seen_at=timezone.now(), endpoints=[
        {"pod": "lora-0", "address": "10.0.0.1:8000"}, {"pod": "lora-1", "address": "10.0.0.2:8000"}])
    stored = parse_snapshot(EXPOSITION).to_dict()
    now = timezone.now()
    PodStat.objects.create(service=service, pod="lora-0", role="engine", snapshot=stored, scraped_at=now)
    PodStat.objects.create(service=service, pod="lora-1", role="engine", snapshot=stored,
                           scraped_at=now - timedelta(minutes=5))  # stale: not read
    [entry] = [s for s in build_snapshot()["services"] if s["id"] == service.pk]
    first, second = entry["endpoints"]
    assert first["lora"] == {"running": ["tiny-chat", "tiny-sql"], "waiting": ["math"], "max_lora": 2}
    assert "lora" not in second


def test_the_real_engines_exposition_reads_as_slots(real_engine):
    snapshot = parse_snapshot(real_engine.get("/metrics"))
    slots = lora_slots((dict(key), value) for key, value in snapshot.gauges["lora_requests_info"].items())
    assert slots["max_lora"] == 1  # the session engine's --max-loras 1 (bench/real_engine.py engine_args)
    assert isinstance(slots["running"], list) and isinstance(slots["waiting"], list)
