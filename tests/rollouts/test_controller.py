"""The rollout's life: a canary service's new revision starts a rollout beside the stable one, each window is
judged on the requests both revisions served (metered rows) and stored as a decision, and the decision is acted on:
advance, extend, promote, or roll back to the stable revision (a new, audited revision)."""

from __future__ import annotations

from datetime import timedelta

from apps.core.models import AuditEntry
from apps.gateway.models import UsageRow
from apps.rollouts.controller import step_rollout
from apps.rollouts.models import Rollout, RolloutDecision, StableRevision
from apps.rollouts.plan import desired_spec
from apps.serving.actions import save_service
from apps.serving.models import InferenceService, Revision, ServiceObservation
from apps.serving.rendering.spec import PoolSpec
from tests.factories import RuntimeFactory
from tests.rollouts.conftest import meter

STEADY = [100 + i % 50 for i in range(200)]  # 100…149 ms, four times over: p95 (rank 190 of 200) is 147 ms
DOUBLED = [2 * t for t in STEADY]  # p95 294 ms; even its lower bound is far above 147 × 1.2 = 176.4 ms


def test_a_new_revision_starts_a_rollout_with_the_first_steps_weight(canary_service, new_runtime):
    spec = new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    assert (rollout.from_revision, rollout.to_revision, rollout.phase, rollout.weight) == (1, 2, "running", 5)
    # The stable workloads keep revision 1's runtime; revision 2 runs beside them as chat-r2.
    assert spec.tag == "v0.33.0"
    assert (spec.canary.revision, spec.canary.weight, spec.canary.unit.name, spec.canary.unit.tag) == (
        2, 5, "chat-r2", "v0.34.0")
    (start,) = RolloutDecision.objects.filter(rollout=rollout)
    assert (start.action, start.reason) == ("start", "Revision 2 starts beside revision 1 with 5 % of the requests.")
    # Rendering again changes nothing: one rollout.
    desired_spec(canary_service)
    assert Rollout.objects.filter(service=canary_service).count() == 1


def test_a_rolling_service_renders_its_newest_revision_alone(canary_service, new_runtime):
    InferenceService.objects.filter(pk=canary_service.pk).update(rollout={"strategy": "rolling"})
    spec = new_runtime()
    assert spec.canary is None and spec.tag == "v0.34.0"
    assert not Rollout.objects.exists()
    assert StableRevision.objects.get(service=canary_service).revision == 2


def test_nothing_is_judged_before_the_steps_minimum_duration(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    assert step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=59)) is None


def test_an_equal_canary_passes_its_window_and_advances_to_the_next_weight(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    generation = InferenceService.objects.get(pk=canary_service.pk).generation
    meter(canary_service, rollout.step_started_at, canary_pod="chat-r2-5c6d-xyz12", ttfts_ms=STEADY,
          stable_ttfts_ms=STEADY)
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action, decision.step, decision.weight) == ("pass", "advance", 0, 5)
    assert (decision.canary_requests, decision.stable_requests) == (200, 200)
    ttft = next(m for m in decision.metrics if m["name"] == "TTFT p95")
    assert (ttft["canary"], ttft["stable"]) == (0.147, 0.147)
    assert decision.reason.endswith("advancing to 50 %.")
    rollout.refresh_from_db()
    assert (rollout.step, rollout.weight) == (1, 50)
    # The weight changed what the cluster runs: a new generation for the reconciler.
    assert InferenceService.objects.get(pk=canary_service.pk).generation == generation + 1
    assert desired_spec(canary_service).canary.weight == 50


def test_passing_the_last_step_below_100_promotes(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    Rollout.objects.filter(pk=rollout.pk).update(step=1)
    meter(canary_service, rollout.step_started_at, canary_pod="chat-r2-5c6d-xyz12", ttfts_ms=STEADY,
          stable_ttfts_ms=STEADY)
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action) == ("pass", "promote")
    rollout.refresh_from_db()
    assert rollout.phase == "promoted"
    assert StableRevision.objects.get(service=canary_service).revision == 2
    spec = desired_spec(canary_service)
    assert spec.canary is None and spec.tag == "v0.34.0"


def test_a_twice_as_slow_canary_is_rolled_back_to_the_stable_revision(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    meter(canary_service, rollout.step_started_at, canary_pod="chat-r2-5c6d-xyz12", ttfts_ms=DOUBLED,
          stable_ttfts_ms=STEADY)
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action) == ("fail", "roll_back")
    assert "TTFT p95 0.29 s vs stable 0.15 s (×2.00) > ×1.20 allowed" in decision.reason, decision.reason
    assert decision.reason.endswith("rolling back to revision 1.")
    rollout.refresh_from_db()
    assert rollout.phase == "rolled_back"
    # The service is set back to revision 1's runtime: revision 3, restored from 1, audited as the controller.
    latest = Revision.objects.filter(service=canary_service).order_by("-number").first()
    assert (latest.number, latest.restored_from) == (3, 1)
    assert InferenceService.objects.get(pk=canary_service.pk).runtime.tag == "v0.33.0"
    assert AuditEntry.objects.filter(object_id=str(canary_service.pk), actor_repr="rollout:controller").exists()
    spec = desired_spec(canary_service)
    assert spec.canary is None and spec.tag == "v0.33.0"
    assert not Rollout.objects.filter(service=canary_service, phase="running").exists()


def test_too_few_requests_extend_the_window_then_hold(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    meter(canary_service, rollout.step_started_at, canary_pod="chat-r2-5c6d-xyz12", ttfts_ms=STEADY[:20],
          stable_ttfts_ms=STEADY)
    at = rollout.window_started_at
    actions = []
    for _ in range(3):  # max_extensions 2: two extensions, then hold (the default when_exhausted)
        at += timedelta(seconds=61)
        decision = step_rollout(rollout.pk, at)
        actions.append((decision.verdict, decision.action))
    assert actions == [("inconclusive", "extend")] * 2 + [("inconclusive", "hold")]
    assert "only 20 canary requests in the window; at least 100 needed on each side" in decision.reason
    rollout.refresh_from_db()
    assert rollout.phase == "paused"


def test_a_crash_looping_canary_fails_at_once(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    ServiceObservation.objects.create(service=canary_service, pods=[
        {"name": "chat-7d9f-abcde", "role": "engine", "phase": "Running", "ready": True, "restarts": 0},
        {"name": "chat-r2-5c6d-xyz12", "role": "engine", "phase": "Running", "ready": False,
         "reason": "CrashLoopBackOff", "restarts": 3}])
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=5))
    assert (decision.verdict, decision.action) == ("fail", "roll_back")
    assert "the canary is crash-looping" in decision.reason


PENDING = [{"name": "chat-7d9f-abcde", "role": "engine", "phase": "Running", "ready": True, "restarts": 0},
           {"name": "chat-r2-5c6d-xyz12", "role": "engine", "phase": "Pending", "ready": False, "restarts": 0,
            "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]


def test_a_canary_never_ready_after_the_deadline_fails_at_once_saying_why(canary_service, new_runtime, settings):
    settings.ROLLOUT_READY_SECONDS = 900
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    ServiceObservation.objects.create(service=canary_service, pods=PENDING)
    # Ten minutes in, a pending canary is still within its time to start: nothing is judged before the window.
    Rollout.objects.filter(pk=rollout.pk).update(created=rollout.window_started_at - timedelta(seconds=595))
    assert step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=5)) is None
    # Sixteen minutes in, it never became ready: rolled back at once, with the pod and the scheduler's words.
    Rollout.objects.filter(pk=rollout.pk).update(created=rollout.window_started_at - timedelta(seconds=955))
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=5))
    assert (decision.verdict, decision.action) == ("fail", "roll_back")
    assert decision.reason == (
        "Fail: the canary never became ready (no pod of chat-r2 ready 960 s after the rollout began; "
        "chat-r2-5c6d-xyz12: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.); "
        "rolling back to revision 1.")


def test_a_newer_revision_during_a_rollout_supersedes_it(canary_service, new_runtime, owner_a):
    new_runtime()
    service = InferenceService.objects.get(pk=canary_service.pk)
    service.runtime = RuntimeFactory(name="vllm-newer", tag="v0.35.0")
    save_service(service, pools=[PoolSpec("engine", replicas=2, max_replicas=4)], adapters=[], actor=owner_a,
                 via="api")
    spec = desired_spec(service)
    first, second = Rollout.objects.filter(service=service).order_by("id")
    assert (first.phase, first.to_revision) == ("aborted", 2)
    assert "Superseded by revision 3" in first.reason
    assert (second.phase, second.from_revision, second.to_revision) == ("running", 1, 3)
    assert (spec.tag, spec.canary.unit.tag) == ("v0.33.0", "v0.35.0")


def test_the_window_compares_requests_that_met_the_same_load_on_their_pod(canary_service, new_runtime):
    # Stable's pod: 180 requests sent a second apart, each alone, 100 ms to the first token; 20 more sent 10 ms
    # after 20 of them, waiting behind them (400 ms). Over every load stable's p95 (rank 190 of 200) is 0.40 s and a
    # canary at 0.20 s would pass; the controller counts, from the rows' times, 0 ahead for the 180 and 1 for the
    # 20, and compares the canary's 100 lone requests (200 ms) with stable's 180 lone ones: ×2.00, rolled back.
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    start = rollout.step_started_at

    def row(pod, sent_s, ttft_ms):
        return UsageRow(at=start + timedelta(seconds=sent_s + (ttft_ms + 50) / 1000), tenant_id=canary_service.tenant_id,
                        service_id=canary_service.pk, model="llama-8b", pod=pod, status=200, ttft_ms=ttft_ms,
                        duration_ms=ttft_ms + 50, prompt_tokens=100, completion_tokens=1)
    stable = [row("chat-7d9f-abcde", k, 100) for k in range(180)]
    stable += [row("chat-7d9f-abcde", k + 0.01, 400) for k in range(20)]
    canary = [row("chat-r2-5c6d-xyz12", k + 0.5, 200) for k in range(100)]
    UsageRow.objects.bulk_create(stable + canary)
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=250))
    assert (decision.verdict, decision.action) == ("fail", "roll_back")
    assert ("TTFT p95 0.20 s vs stable 0.10 s (×2.00) > ×1.20 allowed in the <250 prompt bucket with 0 ahead on "
            "their pod") in decision.reason, decision.reason
    (bucket,) = next(m for m in decision.metrics if m["name"] == "TTFT p95")["buckets"]
    assert (bucket["ahead"], bucket["canary_requests"], bucket["stable_requests"]) == ("0 ahead", 100, 180)
