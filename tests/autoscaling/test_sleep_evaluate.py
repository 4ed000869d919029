"""Sleep instead of zero in the autoscaler's evaluation, against PostgreSQL: an idle serverless pool whose policy
says sleep keeps its replica and is put to sleep (a decision says which and why), stays so while idle, and a
request's traffic records the wake; `auto` deletes when the wake history says sleeping costs more."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.autoscaling.evaluate import evaluate_service
from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision
from apps.autoscaling.sleeping import asleep_since, wake_history
from apps.telemetry.models import SeriesPoint
from tests.autoscaling.test_evaluate import BUILTIN, pool, service_with


def idle_service(tenant, **idle):
    spec = dict(BUILTIN, scale_to_zero_after_seconds=60, **idle)
    service = service_with(tenant, replicas=1, min_replicas=0, autoscaling=spec, mode="serverless")
    type(service).objects.filter(pk=service.pk).update(created=timezone.now() - timedelta(hours=1))
    SeriesPoint.objects.create(service=service, role="", time=timezone.now() - timedelta(seconds=120), running=2)
    return service


def test_an_idle_pool_that_sleeps_keeps_its_replica_and_a_request_records_the_wake(tenant_a):
    service = idle_service(tenant_a, when_idle="sleep")
    [outcome] = evaluate_service(service.pk)
    # Llama 8B in bf16 on one H100 SXM: 16.06e9 B / (63e9 x 0.8 B/s) = 0.32 s + 0.5 s = 0.8 s.
    assert (outcome.action, outcome.desired) == ("slept", 1)
    assert pool(service).replicas == 1  # the pod and its GPU stay
    decision = ScalingDecision.objects.get(service=service)
    assert (decision.rule, decision.current_replicas, decision.desired_replicas) == ("idle_to_sleep", 1, 1)
    assert decision.reason.startswith("no arrivals, running or waiting requests for 1")
    assert decision.reason.endswith("; when_idle is sleep: sleep at level 1 (wakes in ~0.8 s, keeps its 1 GPU(s))")
    assert asleep_since(service, "engine") == decision.time

    # Still idle: nothing changes and nothing is stored.
    assert evaluate_service(service.pk)[0].action is None
    assert ScalingDecision.objects.filter(service=service).count() == 1

    # A request came 50 s after the sleep (the gateway woke the engine): the wake is recorded with the gap.
    later = decision.time + timedelta(seconds=50)
    SeriesPoint.objects.create(service=service, role="", time=later, prompt_tps=40, running=1)
    [woken] = evaluate_service(service.pk, now=later + timedelta(seconds=5))
    assert (woken.action, woken.desired) == ("woken", 1)
    assert woken.reason == ("a request woke the 1 sleeping replica(s) after 50 s asleep; a wake from level 1 takes "
                            "~0.8 s (copy 16.1 GB at 50.4 GB/s + 0.5 s)")
    assert asleep_since(service, "engine") is None
    # The history runs to the decision that saw the wake (5 s later), as it does to an activation's decision.
    assert wake_history(service, "engine") == [55.0]


def test_auto_deletes_when_the_idle_gaps_cost_more_asleep_than_a_cold_start(tenant_a):
    service = idle_service(tenant_a, when_idle="auto", wake_objective_seconds=120)
    PoolAutoscalerState.objects.create(service=service, pool="engine", cold_start_s=40.0)
    now = timezone.now()
    common = {"service": service, "pool": "engine", "raw_recommendation": 0, "stabilized": 0, "limited": 0,
              "reason": "earlier"}
    # One earlier gap of an hour: to zero at now - 2 h, activated at now - 1 h.
    ScalingDecision.objects.create(time=now - timedelta(hours=2), current_replicas=1, desired_replicas=0,
                                   rule="idle_to_zero", action="scaled", **common)
    ScalingDecision.objects.create(time=now - timedelta(hours=1), current_replicas=0, desired_replicas=1,
                                   rule="activation", action="scaled", **common)
    [outcome] = evaluate_service(service.pk)
    # Both meet 120 s (wake 0.8 s, cold start 40 s); an hour asleep holds 1 GPU-h against 40 s = 0.01 GPU-h.
    assert (outcome.action, outcome.desired) == ("scaled", 0)
    assert outcome.reason.endswith("median idle gap 3600 s over the last 1 wake(s): sleep 1.00 GPU-h against "
                                   "delete 0.01 GPU-h a gap → delete")
    assert pool(service).replicas == 0
