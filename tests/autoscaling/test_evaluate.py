"""The autoscaler's evaluation against stored telemetry in PostgreSQL: a change goes through the API's scale
action (generation, audit by the autoscaler, decision row), no-change evaluations are only counted, quota and
free GPUs bound or block it, serverless pools go to zero and are activated, cold starts are measured."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.autoscaling.evaluate import evaluate_service, pool_rates, prune_decisions
from apps.autoscaling.models import ActivationSignal, PoolAutoscalerState, ScalingDecision
from apps.clusters.models import GpuNode
from apps.core.models import AuditEntry
from apps.serving.models import Pool
from apps.telemetry.models import PodStat, SeriesPoint
from apps.tenancy.queues import set_gpu_quota
from capacity.gpus import gpu_for
from tests.autoscaling.steps import pods_at, steady_then
from tests.factories import InferenceServiceFactory

BUILTIN = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}}


def service_with(tenant, replicas=2, max_replicas=8, min_replicas=1, autoscaling=None, mode="standard"):
    return InferenceServiceFactory(
        tenant=tenant, autoscaling=autoscaling or dict(BUILTIN), deployment_mode=mode,
        pools=[{"role": "engine", "replicas": replicas, "min_replicas": min_replicas, "max_replicas": max_replicas}],
    )


def pod_figures(service, *waiting, seconds_ago=2, at=None):
    at = at or timezone.now() - timedelta(seconds=seconds_ago)
    for i, value in enumerate(waiting):
        PodStat.objects.update_or_create(service=service, pod=f"{service.name}-{i}", defaults={
            "role": "engine", "scraped_at": at, "figures": {"waiting": value, "running": 1, "kv_cache_usage": 0.1}})


def pool(service) -> Pool:
    return Pool.objects.get(service=service, role="engine")


def test_a_change_is_made_through_the_scale_action_and_stored_with_its_reason(tenant_a):
    service = service_with(tenant_a)
    pod_figures(service, 12, 12)
    generation = service.generation
    [outcome] = evaluate_service(service.pk)
    # ratio 12/4 = 3 → ceil(3 × 2) = 6; default scale-up allows max(2 × 2, 2 + 4) = 6.
    assert (outcome.action, outcome.desired) == ("scaled", 6)
    assert pool(service).replicas == 6
    service.refresh_from_db()
    assert service.generation == generation + 1
    entry = AuditEntry.objects.filter(object_id=str(service.pk)).latest("id")
    assert (entry.actor_repr, entry.via) == ("autoscaler:builtin", "system")
    decision = ScalingDecision.objects.get(service=service)
    assert (decision.current_replicas, decision.desired_replicas, decision.raw_recommendation) == (2, 6, 6)
    assert (decision.action, decision.rule, decision.generation) == ("scaled", "metric", generation + 1)
    assert decision.metrics[0] | {"ratio": round(decision.metrics[0]["ratio"], 6)} == {
        "name": "waiting_requests_per_replica", "value": 12.0, "target": 4.0, "ratio": 3.0, "replicas": 6,
        "missing": 0}
    assert decision.reason == "waiting 12.0 per replica > target 4 (×3.00) → 6 replicas"


def test_an_evaluation_that_changes_nothing_is_counted_not_stored(tenant_a):
    service = service_with(tenant_a)
    pod_figures(service, 4, 4)  # ratio 1
    evaluate_service(service.pk)
    evaluate_service(service.pk)
    assert not ScalingDecision.objects.filter(service=service).exists()
    state = PoolAutoscalerState.objects.get(service=service, pool="engine")
    assert (state.evaluations, state.unchanged) == (2, 2)


def test_stale_pod_figures_count_as_missing(tenant_a):
    service = service_with(tenant_a)
    pod_figures(service, 12, 12, seconds_ago=600)
    [outcome] = evaluate_service(service.pk)
    assert outcome.action is None and pool(service).replicas == 2  # no metrics → no change


def test_a_scale_up_beyond_the_tenant_quota_is_blocked_with_the_figures(tenant_a):
    set_gpu_quota(tenant_a, 3)
    service = service_with(tenant_a)
    pod_figures(service, 12, 12)
    [outcome] = evaluate_service(service.pk)
    # 2 GPUs in use of 3 → room for one more replica: 6 is bounded to 3.
    assert (outcome.action, outcome.desired) == ("scaled", 3)
    decision = ScalingDecision.objects.get(service=service)
    assert decision.rule == "quota"
    assert "tenant alpha uses 2 of 3 GPUs" in decision.reason
    pod_figures(service, 12, 12, 12)
    evaluate_service(service.pk)
    blocked = ScalingDecision.objects.filter(service=service).first()
    assert (blocked.action, blocked.desired_replicas, blocked.rule) == ("blocked", 3, "quota")
    assert "blocked by tenant GPU quota: tenant alpha uses 3 of 3 GPUs" in blocked.reason


def test_a_scale_up_is_bounded_by_the_free_gpus_of_the_pools_type(tenant_a):
    service = service_with(tenant_a)
    product = gpu_for("h100-sxm-80gb").product
    GpuNode.objects.create(cluster=service.cluster, name="h100-a", gpu_product=product, gpu_count=8,
                           allocatable=8, allocated=7)
    GpuNode.objects.create(cluster=service.cluster, name="l4-a", gpu_product="NVIDIA-L4", gpu_count=4,
                           allocatable=4, allocated=0)
    pod_figures(service, 12, 12)
    evaluate_service(service.pk)
    decision = ScalingDecision.objects.get(service=service)
    # One H100 free (the L4s do not count) → 2 + 1 = 3.
    assert (decision.desired_replicas, decision.rule) == (3, "capacity")
    assert f"1 {product} GPUs free on 1 node(s)" in decision.reason


def test_a_serverless_pool_goes_to_zero_when_idle_and_is_activated_by_a_held_request(tenant_a):
    spec = dict(BUILTIN, scale_to_zero_after_seconds=60)
    service = service_with(tenant_a, replicas=1, min_replicas=0, autoscaling=spec, mode="serverless")
    type(service).objects.filter(pk=service.pk).update(created=timezone.now() - timedelta(hours=1))
    SeriesPoint.objects.create(service=service, role="", time=timezone.now() - timedelta(seconds=120), running=2)
    SeriesPoint.objects.create(service=service, role="", time=timezone.now() - timedelta(seconds=5), running=0,
                               waiting=0, prompt_tps=0, ready_replicas=1)
    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.desired) == ("scaled", 0)
    assert "no arrivals, running or waiting requests for 1" in outcome.reason  # about 120 s
    # At zero with nothing held: nothing happens, nothing is stored.
    assert evaluate_service(service.pk)[0].action is None
    ActivationSignal.objects.create(service=service, pending=1, observed_at=timezone.now())
    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.desired) == ("scaled", 1)
    assert ScalingDecision.objects.filter(service=service, rule="activation").exists()


def test_the_cold_start_is_measured_and_recorded_on_later_decisions(tenant_a):
    service = service_with(tenant_a)
    pod_figures(service, 12, 12)
    evaluate_service(service.pk)  # 2 → 6
    state = PoolAutoscalerState.objects.get(service=service)
    started = state.scale_up_started_at
    SeriesPoint.objects.create(service=service, role="", time=started + timedelta(seconds=42), ready_replicas=6)
    pod_figures(service, *[40] * 6, at=started + timedelta(seconds=43))
    evaluate_service(service.pk, now=started + timedelta(seconds=45))
    state.refresh_from_db()
    assert state.cold_start_s == pytest.approx(42)
    assert ScalingDecision.objects.filter(service=service).first().cold_start_s == pytest.approx(42)


def test_decisions_past_retention_are_pruned(tenant_a, settings):
    settings.AUTOSCALE_DECISION_RETENTION_DAYS = 7
    service = service_with(tenant_a)
    common = {"service": service, "pool": "engine", "current_replicas": 1, "desired_replicas": 2,
              "raw_recommendation": 2, "stabilized": 2, "limited": 2, "rule": "metric", "action": "scaled",
              "reason": "r"}
    ScalingDecision.objects.create(time=timezone.now() - timedelta(days=8), **common)
    ScalingDecision.objects.create(time=timezone.now() - timedelta(days=6), **common)
    assert prune_decisions() == 1
    assert ScalingDecision.objects.count() == 1


def test_prefill_and_decode_pools_are_decided_apart_on_their_own_signals(tenant_a):
    service = InferenceServiceFactory(
        tenant=tenant_a, deployment_mode="pd_disaggregated",
        autoscaling={"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4,
                                                          "running_requests_per_replica": 16}},
        pools=[{"role": "prefill", "replicas": 1, "max_replicas": 4}, {"role": "decode", "replicas": 2, "max_replicas": 4}])
    now = timezone.now()
    # Prefill queues (waiting 12 → ratio 3 → 3 replicas); decode runs 16 per replica (ratio 1). Decode also
    # reports waiting 12, but waiting is not a decode signal, so it must not scale decode.
    PodStat.objects.create(service=service, pod="p-0", role="prefill", scraped_at=now,
                           figures={"waiting": 12, "running": 2})
    for i in range(2):
        PodStat.objects.create(service=service, pod=f"d-{i}", role="decode", scraped_at=now,
                               figures={"waiting": 12, "running": 16})
    outcomes = {o.pool: o for o in evaluate_service(service.pk)}
    assert (outcomes["prefill"].action, outcomes["prefill"].desired) == ("scaled", 3)
    assert (outcomes["decode"].action, outcomes["decode"].desired) == (None, 2)
    assert list(ScalingDecision.objects.filter(service=service).values_list("pool", flat=True)) == ["prefill"]


def test_prompt_tokens_per_s_against_the_planners_prefill_rate_scales_and_the_decision_says_so(tenant_a):
    # Llama 3.1 8B on one H100 (the factory's pool). The planner's rates are the roofline kubesim's engines
    # step by; the decision keeps them. Each of 2 pods prefilled 30,000 prompt tokens/s: 60,000 in all. A
    # replica may be loaded to 40 % of its prefill rate R, so ceil(16,000 / (0.4·R)) replicas; the default
    # scale-up allows up to 6 from 2 and the pool's maximum is 8.
    service = service_with(tenant_a)
    for i in range(2):
        PodStat.objects.update_or_create(service=service, pod=f"{service.name}-{i}", defaults={
            "role": "engine", "scraped_at": timezone.now() - timedelta(seconds=2),
            "figures": {"waiting": 4, "running": 1, "kv_cache_usage": 0.1, "prompt_tokens_per_s": 30000.0}})
    [outcome] = evaluate_service(service.pk)
    decision = ScalingDecision.objects.get(service=service)
    rate = decision.signals["rates"]["prefill_tokens_per_s"]
    assert 5_000 < rate < 100_000  # an H100 prefills an 8B model's prompts at tens of thousands of tokens/s
    wanted = -(-60_000 // (0.4 * rate))
    assert wanted > 2, "the figures above must ask for a scale-up"
    assert (outcome.desired, decision.rule) == (min(wanted, 6), "prefill_load" if wanted <= 6 else "ScaleUpLimit")
    assert decision.reason.startswith("60000 prompt tokens/s = ")
    assert decision.signals["ttft_definition"] == "absolute_p95"  # no pod reported its prompts' lengths
    assert decision.signals["forecast"]["words"].startswith("forecast ")


def stat(service, i, **figures):
    PodStat.objects.update_or_create(service=service, pod=f"{service.name}-{i}", defaults={
        "role": "engine", "scraped_at": timezone.now() - timedelta(seconds=2),
        "figures": {"waiting": 1, "running": 1, "kv_cache_usage": 0.1, **figures}})


def test_the_engines_queue_time_scales_the_pool_and_the_decision_keeps_what_was_waiting(tenant_a):
    # Two pods report queue time p95 2.0 s and 1.5 s: the pool's is taken as the higher (an upper bound). With
    # no TTFT target the allowance is 2 s, so the queue-time target is 1 s: ×2.0 → max(2 + 1, ceil(2 × 2)) = 4.
    # 100 + 150 prompt tokens wait: drained within 1 s by one replica, so the backlog asks for 1; waiting 1 per
    # replica against 4 asks for 1.
    service = service_with(tenant_a)
    stat(service, 0, queue_time_p95_s=2.0, waiting_prompt_tokens=100.0, requests_per_s=3.0)
    stat(service, 1, queue_time_p95_s=1.5, waiting_prompt_tokens=150.0, requests_per_s=2.0)
    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.desired) == ("scaled", 4)
    decision = ScalingDecision.objects.get(service=service)
    assert decision.rule == "queue_time"
    assert decision.reason == "queue time p95 2.00 s > 1.00 s → 4 replicas"
    assert (decision.signals["queue_time_p95_s"], decision.signals["waiting_prompt_tokens"],
            decision.signals["arrivals_per_s"]) == (2.0, 250.0, 5.0)


def test_a_live_ttft_over_target_at_the_prompts_prefill_floor_is_said_in_words_and_the_reactive_floor_scales(
        tenant_a):
    # TTFT target 2 s; the stored TTFT p95 is 3.1 s. The pods' prompt p95 is 2.9 s of the replica's prefill
    # rate (from the capacity planner), so TTFT is 0.2 s above the prompts' floor: within the allowance, and the
    # signals hold at 2, saying more replicas would not help. The reactive rules, the floor, judge TTFT as an
    # absolute p95: 3.1 s against 2 s (×1.55) asks max(2 + 1, ceil(2 × 1.55)) = 4, within the scale-up policy's
    # max(2 × 2, 2 + 4) = 6.
    service = service_with(tenant_a, autoscaling={"autoscaler": "builtin", "targets": {
        "waiting_requests_per_replica": 4, "ttft_p95_seconds": 2}})
    rate = pool_rates(service, pool(service)).prefill_tokens_per_s
    SeriesPoint.objects.create(service=service, role="", time=timezone.now() - timedelta(seconds=3),
                               ttft_p95=3.1, ready_replicas=2)
    for i in range(2):
        stat(service, i, prompt_tokens_p95=2.9 * rate, waiting=4)  # on the waiting target: no other change
    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.desired) == ("scaled", 4)
    decision = ScalingDecision.objects.get(service=service)
    assert decision.rule == "reactive_floor"
    assert decision.reason.startswith("TTFT p95 3.1 s > target 2 s (×1.55); waiting 4 per replica = target 4 (×1.00) "
                                      "→ 4 replicas; the reactive rules' ask is the floor (the signals ask 2 "
                                      "replicas: TTFT p95 3.1 s is the prompts' own prefill time (floor 2.9 s): more "
                                      "replicas would not help; holding at 2")
    assert decision.signals["ttft_definition"] == "budget"


def test_a_step_between_evaluations_is_met_at_once_at_the_panic_rate_and_kept_as_a_decision(tenant_a):
    # Steady at 0.1 × R per pod, the pool keeps 2 replicas (its minimum). A scrape 5 s after
    # the last evaluation shows 3 × R per pod: 6 R in all, 30 × the smoothed load, ceil(6 / 0.4) = 15 replicas
    # for it. The periodic evaluation's default scale-up would allow max(2 × 2, 2 + 4) = 6; the surge's
    # +1000 % allows 22, so the pool's maximum, 8.
    from apps.rollouts.scaling import evaluate_service as rollout_aware

    service = service_with(tenant_a, min_replicas=2)
    rate = pool_rates(service, pool(service)).prefill_tokens_per_s
    last = steady_then(service, rate, timezone.now() - timedelta(minutes=5))
    state = PoolAutoscalerState.objects.get(service=service, pool="engine")
    evaluations, forecast = state.evaluations, state.history["forecast"]
    assert pool(service).replicas == 2 and evaluations == 10
    at = last + timedelta(seconds=5)
    # Nothing stepped: no change, no decision, not even a count.
    assert [o.action for o in rollout_aware(service.pk, now=at, between=True)] == [None]
    pods_at(service, 3 * rate, at - timedelta(seconds=1), lambda i: 20.0)
    [outcome] = rollout_aware(service.pk, now=at, between=True)
    assert (outcome.action, outcome.current, outcome.desired) == ("scaled", 2, 8)
    assert pool(service).replicas == 8
    decision = ScalingDecision.objects.filter(service=service).latest("time")
    assert decision.reason.startswith("surge between evaluations (scale-up at +1000% / 15 s): ")
    # The rules ask more than the maximum: the pool goes to it, and the decision says that it binds.
    assert "limited by max 8 → 8; the maximum binds: the rules ask " in decision.reason
    assert decision.reason.endswith(" replicas for the SLO, the pool's maximum is 8; the what-if lab has not searched "
                                    f"this service yet (manage.py whatif --service alpha/{service.name} --search "
                                    "answers what would meet the SLO)")
    assert decision.raw_recommendation >= 15
    state.refresh_from_db()
    assert state.evaluations == evaluations and state.history["forecast"] == forecast
