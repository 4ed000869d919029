"""The sleep half of scale to zero, inside one evaluation (apps/autoscaling/evaluate.py).

For a serverless pool whose policy allows sleeping (`when_idle` sleep or auto, apps/serving/idle_spec.py):
- idle for its window: `idle.choose` picks sleep or delete from the pool's own wake history (its decisions),
  the wake time the weights and the GPU's host link give (capacity/sleep.py) and the last measured cold start.
  Sleep keeps the replicas (and their GPUs), writes an `idle_to_sleep` decision and asks a worker to post
  `/sleep` to the engines (workers/sleep.py); delete goes on as scale to zero, its reason saying why;
- asleep: nothing changes until a request comes (the gateway wakes the engines on the data path); the first
  evaluation that sees traffic after the sleep writes a `wake` decision with how long the pool slept.
Canary sides of a rollout are never put to sleep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from apps.autoscaling.choices import ScalingAction, ScalingRule
from apps.autoscaling.idle import SLEEP, choose, idle_gaps
from apps.autoscaling.models import ScalingDecision
from apps.serving.capacity import arch_of
from apps.serving.idle_spec import idle_spec
from capacity.gpus import gpu_for
from capacity.sleep import WakeFacts, wake_seconds, wake_words
from controlplane.celery import app as celery_app
from controlplane.tasknames import AUTOSCALE_SLEEP_POOL

HISTORY_ROWS = 200  # the decisions a pool's wake history is read from


@dataclass(frozen=True)
class SleepStep:
    """What sleep makes of this evaluation: the replicas wanted, the action (None: nothing to store), why."""

    desired: int
    action: str | None
    rule: str
    reason: str


def asleep_since(service, role: str) -> datetime | None:
    """When the pool was put to sleep, if its last sleep has had no wake since."""
    last = (ScalingDecision.objects.filter(service=service, pool=role, revision__isnull=True,
                                           action__in=(ScalingAction.SLEPT, ScalingAction.WOKEN))
            .order_by("-time", "-id").values_list("action", "time").first())
    return last[1] if last and last[0] == ScalingAction.SLEPT else None


def wake_history(service, role: str) -> list[float]:
    """The pool's idle gaps, oldest first: from going to zero or to sleep until the next activation or wake."""
    rows = (ScalingDecision.objects.filter(service=service, pool=role, revision__isnull=True)
            .filter(Q(rule=ScalingRule.IDLE_TO_ZERO, action=ScalingAction.SCALED)
                    | Q(rule=ScalingRule.IDLE_TO_SLEEP, action=ScalingAction.SLEPT)
                    | Q(rule=ScalingRule.ACTIVATION, action=ScalingAction.SCALED)
                    | Q(rule=ScalingRule.WAKE, action=ScalingAction.WOKEN))
            .order_by("-time", "-id").values_list("time", "rule")[:HISTORY_ROWS])
    idle = (ScalingRule.IDLE_TO_ZERO, ScalingRule.IDLE_TO_SLEEP)
    return idle_gaps([(t.timestamp(), "idle" if rule in idle else "wake") for t, rule in reversed(rows)])


def wake_facts(service, pool) -> WakeFacts:
    """One GPU's share of the weights and its links, for a replica of the pool."""
    gpus = max(pool.gpus_per_replica * pool.nodes_per_replica, 1)
    arch = arch_of(service.model)
    return WakeFacts.for_gpu(arch.weights_bytes(arch.dtype_bytes, gpus), gpu_for(pool.gpu_type))


def wake_estimate(service, pool, level: int) -> float:
    """Seconds a replica of the pool takes to wake from `level`: one GPU's share of the weights over its host
    link (level 2: read from storage first), plus the stated overhead."""
    return wake_seconds(level, wake_facts(service, pool))


def idle_step(service, pool, ev, obs, cold_start_s: float | None, now: datetime, canary: bool) -> SleepStep | None:
    """Sleep's part of this evaluation of a pool; None when it has none (the evaluation goes on as it is)."""
    spec = idle_spec(service.autoscaling)
    if not spec.may_sleep or canary:
        return None
    since = asleep_since(service, pool.role)
    if since is not None:
        active_at = now - timedelta(seconds=obs.idle_for_s) if obs.idle_for_s is not None else None
        if active_at is not None and active_at > since:
            slept = (active_at - since).total_seconds()
            facts, level = wake_facts(service, pool), spec.sleep_level
            return SleepStep(ev.current, ScalingAction.WOKEN, ScalingRule.WAKE,
                             f"a request woke the {ev.current} sleeping replica(s) after {slept:.0f} s asleep; "
                             f"a wake from level {level} takes ~{wake_seconds(level, facts):.1f} s "
                             f"({wake_words(level, facts)})")
        return SleepStep(ev.current, None, ScalingRule.IDLE_TO_SLEEP, f"asleep since {since:%H:%M:%S}")
    if ev.rule != ScalingRule.IDLE_TO_ZERO or ev.desired != 0 or ev.current == 0:
        return None
    gpus = pool.gpus_per_replica * pool.nodes_per_replica
    wake_s = wake_estimate(service, pool, spec.sleep_level)
    choice = choose(spec, gaps_s=wake_history(service, pool.role), wake_s=wake_s, cold_start_s=cold_start_s, gpus=gpus)
    if choice.action != SLEEP:
        return SleepStep(0, None, ScalingRule.IDLE_TO_ZERO, f"{ev.reason}; {choice.reason}")
    args = [service.pk, pool.role, spec.sleep_level]
    transaction.on_commit(lambda: celery_app.send_task(AUTOSCALE_SLEEP_POOL, args=args, retry=False,
                                                       ignore_result=True))
    return SleepStep(ev.current, ScalingAction.SLEPT, ScalingRule.IDLE_TO_SLEEP,
                     f"{ev.reason.split(' → ')[0]}; {choice.reason}")
