"""The built-in autoscaler during a canary rollout: each revision is judged on its own pods' figures (the share of
the requests its weight sends it) and scaled apart, the canary's count kept on the rollout and rendered, the stable
side never scaled down before promotion, each decision naming its revision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision
from apps.rollouts.models import Rollout
from apps.rollouts.plan import desired_spec
from apps.rollouts.scaling import canary_gpus, evaluate_service
from apps.rollouts.units import sizes_for_step
from apps.serving.actions import save_service
from apps.serving.models import InferenceService, Pool
from apps.serving.rendering.spec import PoolSpec
from apps.telemetry.models import PodStat
from apps.tenancy.queues import set_gpu_quota
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory
from tests.rollouts.conftest import CANARY

WAITING_4 = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}}


@pytest.fixture
def rolling_out(canary_service, new_runtime):
    """Revision 2 at 5 % beside revision 1 (2 replicas, at most 4), the service scaled by the built-in autoscaler."""
    InferenceService.objects.filter(pk=canary_service.pk).update(autoscaling=WAITING_4)
    new_runtime()
    return Rollout.objects.get(service=canary_service)


def figures(service, waiting_by_pod: dict[str, float]):
    at = timezone.now() - timedelta(seconds=2)
    for pod, waiting in waiting_by_pod.items():
        PodStat.objects.update_or_create(service=service, pod=pod, defaults={
            "role": "engine", "scraped_at": at, "figures": {"waiting": waiting, "running": 1, "kv_cache_usage": 0.1}})


def stable_replicas(service) -> int:
    return Pool.objects.get(service=service, role="engine").replicas


def test_a_busy_canary_is_scaled_apart_from_the_stable_pool_and_its_decision_names_it(canary_service, rolling_out,
                                                                                      api):
    # Stable's two pods at the target (4 waiting each); the canary's one pod with 12 waiting.
    figures(canary_service, {"chat-7d9f-aaaaa": 4, "chat-7d9f-bbbbb": 4, "chat-r2-5c6d-ccccc": 12})
    generation = InferenceService.objects.get(pk=canary_service.pk).generation
    evaluate_service(canary_service.pk)
    # 12 / 4 = ×3 on the canary's one replica → 3 (within its maximum, 4); stable unchanged at 2.
    rollout = Rollout.objects.get(pk=rolling_out.pk)
    assert rollout.canary_replicas == {"engine": 3}
    assert stable_replicas(canary_service) == 2
    (decision,) = ScalingDecision.objects.filter(service=canary_service)
    assert (decision.revision, decision.current_replicas, decision.desired_replicas, decision.action) == (
        2, 1, 3, "scaled")
    assert decision.reason.startswith("revision 2 (canary, 5 % of the requests): waiting 12.0 per replica")
    listed = api("owner_a").get(f"/api/v1/services/{canary_service.pk}/decisions/").json()
    assert [(d["pool"], d["revision"], d["desired_replicas"]) for d in listed["results"]] == [("engine", 2, 3)]
    # The count reaches the cluster: a new generation, and the canary unit rendered with three replicas.
    assert InferenceService.objects.get(pk=canary_service.pk).generation == generation + 1
    unit = desired_spec(InferenceService.objects.get(pk=canary_service.pk)).canary.unit
    assert (unit.name, [p.replicas for p in unit.pools]) == ("chat-r2", [3])


def test_the_scaling_panel_names_the_revision_of_each_decision(canary_service, rolling_out, client, viewer_a):
    figures(canary_service, {"chat-7d9f-aaaaa": 4, "chat-7d9f-bbbbb": 4, "chat-r2-5c6d-ccccc": 12})
    evaluate_service(canary_service.pk)
    client.force_login(viewer_a)
    html = client.get(reverse("web:scaling-panel", args=[canary_service.pk])).content.decode()
    assert '<span class="pool">engine · revision 2</span>' in html
    assert "revision 2 (canary, 5 % of the requests): waiting 12.0 per replica" in html


def test_the_stable_side_reads_only_its_own_pods(canary_service, rolling_out):
    # Stable's pods are busy (12 waiting each), the canary idle: only the stable pool grows.
    figures(canary_service, {"chat-7d9f-aaaaa": 12, "chat-7d9f-bbbbb": 12, "chat-r2-5c6d-ccccc": 4})
    evaluate_service(canary_service.pk)
    # ×3 on 2 replicas → 6, bounded by the pool's maximum of 4.
    assert stable_replicas(canary_service) == 4
    (decision,) = ScalingDecision.objects.filter(service=canary_service)
    assert (decision.revision, decision.desired_replicas) == (1, 4)
    assert decision.reason.startswith("revision 1 (stable, 95 % of the requests; kept at 2 or more until promotion)")
    assert Rollout.objects.get(pk=rolling_out.pk).canary_replicas == {}


def test_the_stable_side_keeps_its_replicas_until_promotion(canary_service, rolling_out):
    idle = {"chat-7d9f-aaaaa": 0, "chat-7d9f-bbbbb": 0, "chat-r2-5c6d-ccccc": 4}
    figures(canary_service, idle)
    evaluate_service(canary_service.pk)
    assert stable_replicas(canary_service) == 2
    assert not ScalingDecision.objects.filter(service=canary_service, revision=1).exists()
    # Once the rollout is over, the same idle figures scale the pool down (to its minimum, 1).
    Rollout.objects.filter(pk=rolling_out.pk).update(phase="promoted")
    evaluate_service(canary_service.pk)
    assert stable_replicas(canary_service) == 1
    # ... and the canary side's autoscaler state is gone with the rollout.
    assert list(PoolAutoscalerState.objects.filter(service=canary_service).values_list("pool", flat=True)) == [
        "engine"]


def test_the_canary_units_gpus_count_against_the_tenants_quota(canary_service, rolling_out, tenant_a):
    Rollout.objects.filter(pk=rolling_out.pk).update(canary_replicas={"engine": 2})
    assert canary_gpus(tenant_a.pk) == 2  # two canary replicas of one GPU each
    set_gpu_quota(tenant_a, 5)  # 2 stable + 2 canary GPUs in use: room for one more replica
    figures(canary_service, {"chat-7d9f-aaaaa": 12, "chat-7d9f-bbbbb": 12, "chat-r2-5c6d-ccccc": 4,
                             "chat-r2-5c6d-ddddd": 4})
    evaluate_service(canary_service.pk)
    assert stable_replicas(canary_service) == 3
    decision = ScalingDecision.objects.get(service=canary_service, revision=1)
    assert decision.rule == "quota" and "uses 4 of 5 GPUs" in decision.reason


def test_a_rising_weight_gives_the_canary_its_share_at_once_or_keeps_what_the_autoscaler_set():
    # Stable runs 4: at 50 % its share is 2; a canary the autoscaler left at 1 gets 2, one at 3 keeps 3.
    assert sizes_for_step({"engine": 4}, {}, 5, 50) == {"engine": 2}
    assert sizes_for_step({"engine": 4}, {"engine": 3}, 5, 50) == {"engine": 3}
    assert sizes_for_step({"prefill": 2, "decode": 6}, {"decode": 1}, 25, 50) == {"prefill": 1, "decode": 3}


def test_the_stable_side_is_sized_with_its_own_revisions_replica_rates(tenant_a, owner_a):
    # Revision 1: the default KV cache; revision 2 stores it in fp8, which halves the bytes a decode step reads per
    # sequence. The stable side keeps revision 1's rates; only the canary's are revision 2's.
    service = save_service(InferenceService(tenant=tenant_a, name="chat", cluster=ClusterFactory(name="sim"),
                                            model=ModelFactory(name="llama-8b"), runtime=RuntimeFactory(name="vllm"),
                                            rollout=CANARY, autoscaling=WAITING_4),
                           pools=[PoolSpec("engine", replicas=2, max_replicas=8)], adapters=[], actor=owner_a, via="api")
    desired_spec(service)
    figures(service, {"chat-7d9f-aaaaa": 12, "chat-7d9f-bbbbb": 12})
    evaluate_service(service.pk)
    before = ScalingDecision.objects.get(service=service).signals["rates"]
    assert before is not None

    service = InferenceService.objects.get(pk=service.pk)
    service.engine_settings = {**service.engine_settings, "kv_cache_dtype": "fp8"}
    save_service(service, pools=[PoolSpec("engine", replicas=stable_replicas(service), max_replicas=8)], adapters=[],
                 actor=owner_a, via="api")
    desired_spec(InferenceService.objects.get(pk=service.pk))
    assert Rollout.objects.get(service=service).to_revision == 2
    figures(service, {**{f"chat-7d9f-{i}": 12 for i in range(stable_replicas(service))}, "chat-r2-5c6d-ccccc": 12})
    evaluate_service(service.pk)
    stable = ScalingDecision.objects.get(service=service, revision=1).signals["rates"]
    canary = ScalingDecision.objects.get(service=service, revision=2).signals["rates"]
    assert stable == before
    assert canary["decode_per_seq_s"] < stable["decode_per_seq_s"]


def test_no_surge_check_runs_while_a_rollout_is_active(canary_service, rolling_out):
    # 5,000,000 prompt tokens wait on each pod: a surge by any measure. During the rollout the check changes
    # nothing (the periodic evaluations scale the two revisions apart). Once it ends the same figures scale the
    # pool from 2 at the panic rate (up to 22), so to its maximum, 4.
    from apps.rollouts.choices import RolloutPhase
    at = timezone.now() - timedelta(seconds=2)
    for pod in ("chat-7d9f-aaaaa", "chat-7d9f-bbbbb", "chat-r2-5c6d-ccccc"):
        PodStat.objects.update_or_create(service=canary_service, pod=pod, defaults={
            "role": "engine", "scraped_at": at, "figures": {"waiting": 40, "running": 1, "kv_cache_usage": 0.1,
                                                            "waiting_prompt_tokens": 5_000_000.0}})
    assert evaluate_service(canary_service.pk, between=True) == []
    assert not ScalingDecision.objects.filter(service=canary_service).exists()
    Rollout.objects.filter(pk=rolling_out.pk).update(phase=RolloutPhase.ABORTED)
    [outcome] = evaluate_service(canary_service.pk, between=True)
    assert (outcome.action, outcome.current, outcome.desired) == ("scaled", 2, 4)
