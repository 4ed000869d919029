"""During a canary rollout the scraper writes each revision's figures as series of their own (roles `stable` and
`canary`, told apart by the revision label the canary unit's pods carry), beside the whole service's, and keeps each
revision's histogram increments; the Rollout panel's chart, the metrics API, the autoscaler and the analysis read
them. Real reconcile onto kubesim, real scrapes."""

from __future__ import annotations

import pytest

from apps.rollouts.models import Rollout
from apps.serving.actions import save_service
from apps.serving.models import InferenceService
from apps.serving.names import service_selector
from apps.serving.rendering.spec import PoolSpec
from apps.telemetry.models import PodStat, RevisionIncrement, SeriesPoint
from tests.factories import ModelFactory, RuntimeFactory
from tests.polling import wait_for
from tests.rollouts.conftest import CANARY
from tests.telemetry.conftest import reconcile_until_ready, send_load
from workers.kube import kube_for
from workers.reconcile import reconcile
from workers.telemetry import engine_pods, scrape_all


def test_each_revision_gets_its_own_series_while_a_canary_runs(sim_cluster, tenant_a, owner_a, sim):
    service = save_service(InferenceService(tenant=tenant_a, name="chat", cluster=sim_cluster, model=ModelFactory(),
                                            runtime=RuntimeFactory(name="vllm-chat"), rollout=CANARY),
                           pools=[PoolSpec("engine", replicas=2, max_replicas=4)], adapters=[], actor=owner_a, via="api")
    service = reconcile_until_ready(service)
    scrape_all()
    assert not SeriesPoint.objects.filter(service=service, role__in=["stable", "canary"]).exists()

    service = InferenceService.objects.get(pk=service.pk)
    service.runtime = RuntimeFactory(name="vllm-next", tag="v0.34.0")
    save_service(service, pools=[PoolSpec("engine", replicas=2, max_replicas=4)], adapters=[], actor=owner_a,
                 via="api")

    def settled():
        reconcile(service.pk)
        pods = engine_pods(kube_for(sim_cluster).list("v1", "Pod", label_selector=service_selector(service.uid)),
                           {str(service.uid): service.pk})
        return sorted(p.side for p in pods if p.ready) == ["canary", "stable", "stable"] and all(p.ready for p in pods)

    # The stable Deployment may roll once (a round-robin service gets a router for the rollout), so poll.
    wait_for(settled, timeout=180, interval=0.5, message="two stable engines and one canary engine ready")
    assert Rollout.objects.get(service=service).weight == 5

    def scraped_all_three():
        """A cycle read every engine (a fetch that timed out on this shared machine is retried by the next)."""
        scrape_all()
        stats = PodStat.objects.filter(service=service)
        return stats.count() == 3 and all(s.error == "" and s.snapshot for s in stats)

    # Every engine's counts before the load, so each request counts in the increments after it.
    wait_for(scraped_all_three, timeout=60, interval=0.2, message="a scrape of all three engines")
    send_load(sim, service, requests=16, concurrency=4)

    def latest_rows():
        last = SeriesPoint.objects.filter(service=service).latest("time").time
        return {(p.role, p.ready_replicas) for p in SeriesPoint.objects.filter(service=service, time=last)}

    def counted() -> bool:
        return scraped_all_three() and sum(r.finished for r in RevisionIncrement.objects.filter(service=service)) > 15.9

    wait_for(counted, timeout=60, interval=0.2, message="the load's requests in the increments")
    # Two stable engines and the canary's one (⌈2 × 5 %⌉), and the whole service's three.
    assert latest_rows() == {("", 3), ("stable", 2), ("canary", 1)}
    # ... and each revision's histogram increments for the rollout's analysis: the 16 requests sent, each once.
    kept = RevisionIncrement.objects.filter(service=service)
    assert {r.role for r in kept} == {"stable", "canary"}
    # (Merging pods scales counters to the pods' mean interval, whose scrapes lie milliseconds apart, tens of them on a
    # loaded machine: 16.03 in one run. A request missed or counted twice is off by one.)
    assert sum(r.finished for r in kept) == pytest.approx(16, abs=0.3)
    assert sum(dict(map(tuple, r.ttft_buckets))["+Inf"] for r in kept) == 16
    # The prompt-length histogram too (vllm:request_prompt_tokens), which the analysis pairs with TTFT by rank.
    assert sum(dict(map(tuple, r.prompt_buckets)).get("+Inf", 0) for r in kept) == pytest.approx(16, abs=0.01)
