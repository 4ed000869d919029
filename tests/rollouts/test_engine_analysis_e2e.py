"""End to end without the gateway: a canary service in kubesim whose new revision's engines a fault makes five
times as slow per step; requests go straight to the service's router (nothing meters them), the scraper keeps each
revision's histograms, and the controller judges the window on them and rolls the canary back, saying why."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.rollouts.controller import step_rollout
from apps.rollouts.models import Rollout
from apps.serving.actions import save_service
from apps.serving.models import InferenceService, Revision
from apps.serving.names import service_selector
from apps.serving.rendering.spec import PoolSpec
from apps.telemetry.models import PodStat, RevisionIncrement
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory
from tests.polling import wait_for
from tests.telemetry.conftest import reconcile_until_ready, send_load
from workers.kube import kube_for
from workers.reconcile import reconcile
from workers.telemetry import engine_pods, scrape_all

# One judged step at 50 % (so a few dozen requests give both sides enough), then the promotion.
HALF = {"strategy": "canary", "min_requests": 10,
        "steps": [{"weight": 50, "min_duration_seconds": 60}, {"weight": 100}]}


@pytest.fixture
def handle(make_cluster):
    return make_cluster(nodes="h100-sxm-80gb:1x8", seed=5)


@pytest.fixture
def sim_cluster(handle, db):
    return ClusterFactory(name="sim", api_url=handle.server.url, insecure_simulator=True)


def test_a_slow_canary_is_rolled_back_on_its_engines_histograms(handle, sim_cluster, tenant_a, owner_a):
    handle.faults("PATCH", {"engine_faults": [{"selector": "controlplane.io/revision=2", "slowdown": 5}]})
    pools = [PoolSpec("engine", replicas=1, max_replicas=2)]
    service = save_service(InferenceService(tenant=tenant_a, name="chat", cluster=sim_cluster, model=ModelFactory(),
                                            runtime=RuntimeFactory(name="vllm-chat"), rollout=HALF),
                           pools=pools, adapters=[], actor=owner_a, via="api")
    service = reconcile_until_ready(service)
    service.runtime = RuntimeFactory(name="vllm-next", tag="v0.34.0")
    save_service(service, pools=pools, adapters=[], actor=owner_a, via="api")

    def settled():
        reconcile(service.pk)
        pods = engine_pods(kube_for(sim_cluster).list("v1", "Pod", label_selector=service_selector(service.uid)),
                           {str(service.uid): service.pk})
        return sorted(p.side for p in pods if p.ready) == ["canary", "stable"] and all(p.ready for p in pods)

    wait_for(settled, timeout=180, interval=0.5, message="one stable and one canary engine ready")

    def scraped_both():
        scrape_all()
        stats = PodStat.objects.filter(service=service)
        return stats.count() == 2 and all(s.error == "" and s.snapshot for s in stats)

    wait_for(scraped_both, timeout=60, interval=0.2, message="a scrape of both engines")
    service = InferenceService.objects.get(pk=service.pk)
    send_load(handle.server, service, requests=40, concurrency=2)

    def counted():
        return scraped_both() and sum(r.finished for r in RevisionIncrement.objects.filter(service=service)) > 39.9

    wait_for(counted, timeout=60, interval=0.2, message="the 40 requests in the revisions' increments")
    rollout = Rollout.objects.get(service=service)
    decision = step_rollout(rollout.pk, timezone.now() + timedelta(seconds=61))

    # The router sent exactly half to each revision; the gateway metered none of them.
    assert (decision.canary_requests, decision.stable_requests) == (20, 20)
    assert (decision.verdict, decision.action) == ("fail", "roll_back"), decision.reason
    # The engines export the prompt-length histogram (scraped into the revisions' increments): TTFT is paired with it.
    assert decision.reason.startswith("Fail (judged on the engines' histograms: no metered requests of both "
                                      "revisions in the window; TTFT paired with prompt lengths by rank): TTFT p95")
    ttft = next(m for m in decision.metrics if m["name"] == "TTFT p95")
    assert all(bucket["bucket"] != "all" for bucket in ttft["buckets"])
    assert ttft["canary"] > 1.2 * ttft["stable"]
    # Set back to revision 1's runtime: a new revision, restored from 1.
    latest = Revision.objects.filter(service=service).order_by("-number").first()
    assert (latest.number, latest.restored_from) == (3, 1)
