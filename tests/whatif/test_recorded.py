"""The recorded load rebuilt from the engines' telemetry when the gateway metered none of a service's requests."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.telemetry.exposition import parse_snapshot
from apps.telemetry.figures import increments, request_mix
from apps.telemetry.models import SERVICE_ROLE, RequestMixPoint, SeriesPoint
from apps.telemetry.retention import compact
from apps.whatif.lab import LoadError, recorded_load, run_whatif
from tests.factories import InferenceServiceFactory
from tests.telemetry.conftest import deploy, send_load, sim, sim_cluster  # noqa: F401 (fixtures)
from workers.telemetry import scrape_all

# Every prompt in (100, 200] tokens, every output in (5, 10]; 1-2-5 buckets as vLLM's.
PROMPT = [["1", 0], ["50", 0], ["100", 0], ["200", 1], ["+Inf", 1]]
OUTPUT = [["1", 0], ["5", 0], ["10", 1], ["+Inf", 1]]


def scaled(buckets, n):
    return [[bound, count * n] for bound, count in buckets]


@pytest.fixture
def service(db):
    return InferenceServiceFactory(tenant__slug="alpha", name="chat",
                                   pools=[{"role": "engine", "replicas": 1, "gpu_type": "l4-24gb"}],
                                   engine_settings={"max_model_len": 8192})


def mix(service, at, interval_s, requests):
    RequestMixPoint.objects.create(service=service, time=at, interval_s=interval_s, requests=requests,
                                   prompt_buckets=scaled(PROMPT, requests), output_buckets=scaled(OUTPUT, requests))


def test_the_engines_request_histograms_give_the_interval_count_and_lengths():
    def exposition(prompt_counts, total):
        bounds = ["100.0", "200.0", "+Inf"]
        lines = ["# TYPE vllm:num_requests_running gauge", 'vllm:num_requests_running{model_name="m"} 0',
                 "# TYPE vllm:request_prompt_tokens histogram"]
        lines += [f'vllm:request_prompt_tokens_bucket{{model_name="m",le="{b}"}} {c}'
                  for b, c in zip(bounds, prompt_counts, strict=True)]
        lines += [f'vllm:request_prompt_tokens_count{{model_name="m"}} {total}',
                  "# TYPE vllm:request_generation_tokens histogram"]
        lines += [f'vllm:request_generation_tokens_bucket{{model_name="m",le="{b}"}} {total}' for b in bounds]
        lines += [f'vllm:request_generation_tokens_count{{model_name="m"}} {total}']
        return "\n".join(lines) + "\n"

    before = parse_snapshot(exposition([1, 3, 3], 3), scraped_at=100.0)
    after = parse_snapshot(exposition([2, 7, 8], 8), scraped_at=115.0)
    found = request_mix(increments(before, after))
    # 8 - 3 = 5 requests finished; 1 more at <=100, 4 more at <=200, 5 in all.
    assert (found.interval_s, found.requests) == (15.0, 5.0)
    assert found.prompt_buckets == {100.0: 1.0, 200.0: 4.0, float("inf"): 5.0}
    # An interval that finished nothing is no mix.
    assert request_mix(increments(after, parse_snapshot(exposition([2, 7, 8], 8), scraped_at=130.0))) is None


def test_requests_are_rebuilt_per_minute_with_lengths_from_the_buckets(service):
    now = timezone.now()
    since = now - timedelta(hours=1)
    # Intervals by their middles: 65 s and 85 s after the window's start are minute 1 (2.5 + 1 = 3.5 requests:
    # 3, 0.5 carried); 195 s is minute 3 (1.5 + 0.5 carried = 2). 5 requests in all. (The lab's window starts
    # a few milliseconds after this test's `since`: no middle is near a minute's edge.)
    mix(service, since + timedelta(seconds=75), 20, 2.5)
    mix(service, since + timedelta(seconds=100), 30, 1.0)
    mix(service, since + timedelta(seconds=205), 20, 1.5)
    mix(service, since - timedelta(seconds=30), 20, 9.0)  # before the window: not counted
    SeriesPoint.objects.create(service=service, role=SERVICE_ROLE, time=now - timedelta(minutes=5),
                               prefix_hit_rate=0.2)
    SeriesPoint.objects.create(service=service, role=SERVICE_ROLE, time=now - timedelta(minutes=4),
                               prefix_hit_rate=0.4)

    load = recorded_load(service)

    assert load.source == "recorded:engines" and len(load.requests) == 5
    times = [r.t for r in load.requests]
    assert times[0] == 0.0 and times == sorted(times)
    # Minute 1's three arrivals lie in [60, 120) s, minute 3's two in [180, 240): from the first arrival, the
    # first three are under 60 s apart, the last two between 60 and 180 s later.
    assert times[2] < 60 and all(60 < t < 180 for t in times[3:])
    assert all(100 <= r.prompt_tokens <= 200 and 5 <= r.output_tokens <= 10 for r in load.requests)
    assert load.prefix_hit_rate == pytest.approx(0.3)  # (0.2 + 0.4) / 2
    assert recorded_load(service).requests == load.requests  # seeded: the same telemetry, the same load


def test_the_gateways_rows_come_first_and_no_telemetry_is_no_load(service):
    now = timezone.now()
    with pytest.raises(LoadError, match="neither the gateway nor the engines' telemetry"):
        recorded_load(service)
    mix(service, now - timedelta(minutes=10), 15, 4.0)
    UsageRow.objects.create(at=now - timedelta(seconds=30), tenant=service.tenant, service_id=service.pk,
                            model="chat", status=200, prompt_tokens=321, completion_tokens=12, duration_ms=5.0)
    load = recorded_load(service)
    assert load.source == "recorded" and [(r.prompt_tokens, r.output_tokens) for r in load.requests] == [(321, 12)]


@pytest.mark.integration
def test_load_sent_to_kubesim_comes_back_as_the_recorded_load(deploy, tenant_a, sim):  # noqa: F811
    service = deploy(tenant_a, "chat")
    scrape_all()
    usages = send_load(sim, service, requests=12, concurrency=4, max_tokens=16)
    scrape_all()

    load = recorded_load(service)

    # All 12 requests finished between the two scrapes; their 16 output tokens fall in vLLM's (10, 20] bucket,
    # their prompts in the bucket of their own lengths.
    assert load.source == "recorded:engines" and len(load.requests) == 12
    assert all(10 <= r.output_tokens <= 20 for r in load.requests)
    prompt = usages[0]["prompt_tokens"]
    low, high = (100, 200) if prompt <= 200 else (200, 500)
    assert low < prompt <= high and all(low <= r.prompt_tokens <= high for r in load.requests)
    result = run_whatif(service, load, [])
    assert result["source"] == "recorded:engines" and result["requests"] == 12
    assert result["scenarios"][0]["slo_attainment"] == 1.0  # 12 short requests on two idle H100s


def test_request_mixes_are_kept_as_long_as_raw_series_rows(service, settings):
    settings.TELEMETRY_RAW_RETENTION_HOURS = 24
    now = timezone.now()
    mix(service, now - timedelta(hours=25), 15, 1.0)
    mix(service, now - timedelta(hours=23), 15, 1.0)
    assert compact(now)["request_mix"] == 1
    assert list(RequestMixPoint.objects.values_list("time", flat=True)) == [now - timedelta(hours=23)]
