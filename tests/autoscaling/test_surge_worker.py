"""A scrape that shows a step sends the service for a surge check, and a real Celery worker on the broker makes
it: the pool goes to its maximum at once and the decision says it was a surge (workers/surge.py →
workers.tasks.autoscale.surge_service → apps.autoscaling.surge)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.autoscaling.evaluate import pool_rates
from apps.autoscaling.models import ScalingDecision
from apps.serving.models import Pool
from apps.telemetry.models import SERVICE_ROLE
from tests.autoscaling.steps import pods_at, scraped, steady_then
from tests.factories import InferenceServiceFactory
from tests.polling import wait_for
from tests.workers.conftest import workers  # noqa: F401 (the real-worker fixture)
from workers.surge import check

pytestmark = pytest.mark.integration


def test_a_scrape_showing_a_step_has_a_worker_scale_the_pool_at_once(tenant_a, workers):  # noqa: F811
    workers(1, only=("autoscale",))
    service = InferenceServiceFactory(
        tenant=tenant_a, autoscaling={"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}},
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 2, "max_replicas": 8}])
    pool = Pool.objects.get(service=service)
    rate = pool_rates(service, pool).prefill_tokens_per_s
    steady_then(service, rate, timezone.now() - timedelta(minutes=4))  # 0.1 × R per pod, 1.5 requests/s
    assert Pool.objects.get(pk=pool.pk).replicas == 2
    # The scrape: 3 × R per pod, 30 × the smoothed load; 15 replicas for it, the maximum is 8.
    pods_at(service, 3 * rate, timezone.now(), lambda i: 20.0)
    assert check({(service.pk, SERVICE_ROLE): scraped(6 * rate)}) == [service.pk]
    decision = wait_for(lambda: ScalingDecision.objects.filter(service=service).first(), timeout=60,
                        message="the worker's surge decision")
    assert (decision.current_replicas, decision.desired_replicas, decision.action) == (2, 8, "scaled")
    assert decision.reason.startswith("surge between evaluations (scale-up at +1000% / 15 s): ")
    assert Pool.objects.get(pk=pool.pk).replicas == 8
