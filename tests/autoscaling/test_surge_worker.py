"""A scrape that shows a step sends the service for a surge check, and a real Celery worker on the broker makes
it: the pool goes to its maximum at once and the decision says it was a surge (workers/surge.py →
workers.tasks.autoscale.surge_service → apps.autoscaling.surge)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.autoscaling.evaluate import evaluate_service, pool_rates
from apps.autoscaling.models import ScalingDecision
from apps.serving.models import Pool
from apps.telemetry.figures import Figures
from apps.telemetry.models import SERVICE_ROLE, PodStat
from tests.factories import InferenceServiceFactory
from tests.polling import wait_for
from tests.workers.conftest import workers  # noqa: F401 (the real-worker fixture)
from workers.surge import check

pytestmark = pytest.mark.integration


def pods_at(service, prompt_tps, requests_per_s, at):
    for i in range(2):
        PodStat.objects.update_or_create(service=service, pod=f"{service.name}-{i}", defaults={
            "role": "engine", "scraped_at": at, "figures": {
                "waiting": 0, "running": 1, "kv_cache_usage": 0.1, "prompt_tokens_per_s": prompt_tps,
                "requests_per_s": requests_per_s, "waiting_prompt_tokens": 0.0}})


def test_a_scrape_showing_a_step_has_a_worker_scale_the_pool_at_once(tenant_a, workers):  # noqa: F811
    workers(1, only=("autoscale",))
    service = InferenceServiceFactory(
        tenant=tenant_a, autoscaling={"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}},
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 2, "max_replicas": 8}])
    pool = Pool.objects.get(service=service)
    rate = pool_rates(service, pool).prefill_tokens_per_s
    start = timezone.now() - timedelta(minutes=4)
    for k in range(10):  # the periodic evaluations of a steady load: 0.1 × R per pod, 1.5 requests/s
        at = start + timedelta(seconds=15 * k)
        pods_at(service, 0.1 * rate, 1.5 + 0.1 * (k % 2), at - timedelta(seconds=2))
        evaluate_service(service.pk, now=at)
    assert Pool.objects.get(pk=pool.pk).replicas == 2
    # The scrape: 3 × R per pod, 30 × the smoothed load; 15 replicas for it, the maximum is 8.
    pods_at(service, 3 * rate, 20.0, timezone.now())
    unknown = dict.fromkeys(("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "kv_cache_usage",
                             "running", "waiting", "prefix_cache_hit_rate", "generation_tokens_per_s", "preemptions",
                             "success_rate"))
    scraped = Figures(engine="vllm", model=None, interval_s=5.0, pods=2, prompt_tokens_per_s=6 * rate,
                      waiting_prompt_tokens=0.0, **unknown)
    assert check({(service.pk, SERVICE_ROLE): scraped}) == [service.pk]
    decision = wait_for(lambda: ScalingDecision.objects.filter(service=service).first(), timeout=60,
                        message="the worker's surge decision")
    assert (decision.current_replicas, decision.desired_replicas, decision.action) == (2, 8, "scaled")
    assert decision.reason.startswith("surge between evaluations (scale-up at +1000% / 15 s): ")
    assert Pool.objects.get(pk=pool.pk).replicas == 8
