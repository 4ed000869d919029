"""From the autoscaler's decision to an engine asleep, with the real parts: an idle serverless vLLM service on
kubesim whose policy says sleep, evaluated in this process; the decision commits, a Celery worker process takes
the sleep task from the broker and posts /sleep through the pod proxy; the pod stays and its engine sleeps."""

from __future__ import annotations

import json
from datetime import timedelta

from django.utils import timezone

from apps.autoscaling.evaluate import evaluate_service
from apps.gateway.models import Upstream
from apps.serving.models import Pool
from apps.serving.names import tenant_namespace
from apps.telemetry.models import SeriesPoint
from tests.factories import ClusterFactory, InferenceServiceFactory, RuntimeFactory
from tests.polling import wait_for
from tests.telemetry.conftest import reconcile_until_ready
from workers.telemetry import scrape_all

POLICY = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4},
          "scale_to_zero_after_seconds": 60, "when_idle": "sleep"}


def test_the_decision_to_sleep_puts_the_engine_to_sleep_through_a_worker(make_cluster, workers, tenant_a):
    handle = make_cluster(nodes="l4-24gb:2x1", seed=3, pod_network="loopback")
    cluster = ClusterFactory(name="sim", api_url=handle.server.url, insecure_simulator=True)
    service = InferenceServiceFactory(
        tenant=tenant_a, name="idle", cluster=cluster, runtime=RuntimeFactory(), deployment_mode="serverless",
        autoscaling=POLICY, engine_settings={"max_model_len": 4096},
        pools=[{"role": "engine", "replicas": 1, "min_replicas": 0, "max_replicas": 1, "gpu_type": "l4-24gb"}])
    reconcile_until_ready(service)
    engine = wait_for(lambda: scrape_all() is not None and (Upstream.objects.filter(service=service).first()
                                                            or Upstream()).engines, timeout=60)[0]["pod"]
    type(service).objects.filter(pk=service.pk).update(created=timezone.now() - timedelta(hours=1))
    SeriesPoint.objects.create(service=service, role="", time=timezone.now() - timedelta(seconds=120), running=1)
    workers(1, only=("autoscale",))

    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.desired) == ("slept", 1)

    def asleep():
        response = handle.core.connect_get_namespaced_pod_proxy_with_path(
            f"{engine}:8000", tenant_namespace(tenant_a.slug), "is_sleeping", _preload_content=False)
        return json.loads(response.data)["is_sleeping"]

    wait_for(asleep, timeout=60, interval=0.5, message="the engine asleep")
    assert Pool.objects.get(service=service).replicas == 1
    assert Upstream.objects.get(service=service).sleep_level == 1
