"""One evaluation of a service's pools by the built-in autoscaler, from stored telemetry (never a scrape).

Per pool: the policy from the service spec, the pods' latest figures (`PodStat`, fresh ones only; every
other replica of the spec counts as a pod without metrics, as a loading pod does for the HPA), the pool's
TTFT/ITL p95 and idle time from the stored series, the activation signal, the HPA history kept in
`PoolAutoscalerState`; then `rules.evaluate`, the bounds of the tenant's GPU quota and the free GPUs of the
pool's type, and a change through `serving.actions.scale_pool` (the API's scale: generation bump, audit
entry by `autoscaler:builtin`, reconcile). A decision row is written when something changed, was held or
was blocked; other evaluations only count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.autoscaling.binds import what_would_meet
from apps.autoscaling.choices import ScalingAction, ScalingRule
from apps.autoscaling.models import ActivationSignal, PoolAutoscalerState, ScalingDecision
from apps.autoscaling.rules import History, Observation, PodSample, evaluate, record_scale
from apps.autoscaling.sleeping import idle_step
from apps.autoscaling.surge import surge
from apps.clusters.models import GpuNode
from apps.core.choices import AuditVia
from apps.serving.actions import ServiceDeleting, scale_pool
from apps.serving.admission import after_scale_up
from apps.serving.capacity import arch_of, service_pool_plan
from apps.serving.models import InferenceService, Pool, ServiceObservation
from apps.serving.quota import quota_room as quota_room_of
from apps.serving.scaling_policy import METRIC_FIGURES, pool_policy
from apps.serving.startup import cold_start_estimate
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SERVICE_ROLE, PodStat, SeriesPoint
from capacity.advisor import plan_rates
from capacity.gpus import gpu_for

log = logging.getLogger(__name__)
LATENCY_LOOKBACK_S = 30  # a p95 is null in an interval without first tokens; look back this far for one


@dataclass
class PoolOutcome:
    pool: str
    current: int
    desired: int
    action: str | None  # None: nothing changed (counted, not stored)
    reason: str


@dataclass
class Target:
    """The replicas one evaluation scales: a pool (`pool_target`), or during a canary rollout one revision's side
    of a pool (built by apps.rollouts.scaling). `pod_prefix` / `not_prefix` pick its pods by name, `scale` makes a
    change (returning the generation it made), `other_gpus` counts the tenant's GPUs no Pool row holds (canary
    units), `words` opens its decisions' reasons."""

    pool: Pool
    replicas: int
    min_replicas: int
    max_replicas: int
    scale: Callable[[int], int | None]
    revision: int | None = None
    pod_prefix: str = ""
    not_prefix: str = ""
    series_role: str | None = None  # the series its latency is read from (None: the pool's or the service's)
    words: str = ""
    other_gpus: Callable[[], int] = field(default=lambda: 0)
    # The replica's rates when they are not the service's current spec's (a stable revision during a rollout).
    rates: Callable[[], object | None] | None = None

    def pod_stats(self, service: InferenceService, now: datetime):
        stats = PodStat.objects.filter(service=service, role=self.pool.role, scraped_at__gte=_fresh_after(now),
                                       figures__isnull=False, error="")
        if self.pod_prefix:
            stats = stats.filter(pod__startswith=self.pod_prefix)
        if self.not_prefix:
            stats = stats.exclude(pod__startswith=self.not_prefix)
        return stats


def pool_target(service: InferenceService, pool: Pool) -> Target:
    """A pool scaled as a whole, through the API's scale action (audited by the autoscaler)."""
    def scale(replicas: int) -> int:
        return scale_pool(service, role=pool.role, replicas=replicas, actor=None, via=AuditVia.SYSTEM,
                          by_autoscaler=True).generation
    return Target(pool=pool, replicas=pool.replicas, min_replicas=pool.min_replicas,
                  max_replicas=pool.max_replicas, scale=scale)


def autoscaled_services():
    """Services the built-in autoscaler evaluates: builtin, not being deleted."""
    return InferenceService.objects.filter(autoscaling__autoscaler="builtin", deletion_requested_at__isnull=True)


def _fresh_after(now: datetime) -> datetime:
    return now - timedelta(seconds=max(3 * settings.TELEMETRY_SCRAPE_SECONDS, 15))


def _pods(service: InferenceService, target: Target, now: datetime) -> tuple[PodSample, ...]:
    """A sample per spec replica: pods scraped recently with figures, then replicas without metrics."""
    samples = []
    for stat in target.pod_stats(service, now).order_by("pod")[: target.replicas]:
        figures = stat.figures or {}
        metrics = {name: float(figures[key]) for name, key in METRIC_FIGURES.items() if figures.get(key) is not None}
        samples.append(PodSample(True, metrics))
    samples += [PodSample(False, {})] * max(target.replicas - len(samples), 0)
    return tuple(samples)


def pool_rates(service: InferenceService, pool: Pool):
    """The replica's prefill rate and decode step from the capacity planner (None: no model or runtime, an
    unreadable spec, an unknown GPU, or a replica that does not fit): what turns the signals into replicas."""
    found = service_pool_plan(service, pool)
    if found is None:
        return None
    plan, knobs, gpu = found
    return plan_rates(arch_of(service.model), gpu, plan.tp, knobs)


def _target_load(service: InferenceService, target: Target, now: datetime, rates) -> dict:
    """What the signals read, from the target's pods' latest interval (fresh figures only; None: no pod
    reported it): prompt tokens/s and requests finished per second (the arrivals' measure), summed; prompt
    tokens waiting, summed over the pods that could estimate them; the queue time p95 and, with the replica's
    rates, the prompts' prefill floor p95 (prompt p95 / prefill rate) as the highest pod's, an upper bound
    of the target's own p95 (stored figures keep quantiles, not buckets)."""
    rows = [f for f in target.pod_stats(service, now).order_by("pod").values_list(
        "figures", flat=True)[: max(target.replicas, 1)] if f]

    def known(key):
        return [float(f[key]) for f in rows if f.get(key) is not None]

    def total(key):
        values = known(key)
        return sum(values) if values else None

    prompt_p95 = max(known("prompt_tokens_p95"), default=None)
    return {"prompt_tokens_per_s": total("prompt_tokens_per_s"), "arrivals_per_s": total("requests_per_s"),
            "waiting_prompt_tokens": total("waiting_prompt_tokens"),
            "queue_time_p95_s": max(known("queue_time_p95_s"), default=None),
            "ttft_floor_p95_s": None if prompt_p95 is None or rates is None else
            prompt_p95 / rates.prefill_tokens_per_s}


def _series_role(service: InferenceService, pool: Pool, multi_pool: bool) -> str:
    return pool.role if multi_pool else SERVICE_ROLE


def _latest(service: InferenceService, role: str, now: datetime) -> dict:
    rows = list(SeriesPoint.objects.filter(
        service=service, role=role, resolution=Resolution.RAW, time__gte=now - timedelta(seconds=LATENCY_LOOKBACK_S),
    ).order_by("-time").values("time", "ttft_p95", "itl_p95", "ready_replicas")[:20])
    out = {"time": rows[0]["time"] if rows else None, "ready": rows[0]["ready_replicas"] if rows else None}
    out["ttft_p95"] = next((r["ttft_p95"] for r in rows if r["ttft_p95"] is not None), None)
    out["itl_p95"] = next((r["itl_p95"] for r in rows if r["itl_p95"] is not None), None)
    return out


def _idle_for(service: InferenceService, state: PoolAutoscalerState, now: datetime) -> float:
    """Seconds since the service last had an arrival (prompt tokens), a running or a waiting request, or
    was scaled (a new replica gets a full window before it may go)."""
    active = (SeriesPoint.objects.filter(service=service, role=SERVICE_ROLE, resolution=Resolution.RAW)
              .filter(Q(running__gt=0) | Q(waiting__gt=0) | Q(prompt_tps__gt=0))
              .order_by("-time").values_list("time", flat=True).first())
    since = max(t for t in (active, state.last_scaled_at, service.created) if t is not None)
    return max((now - since).total_seconds(), 0.0)


def _pending_activation(service: InferenceService, now: datetime) -> tuple[int, int]:
    """Requests held for the service at zero, and how many of them the gateway holds."""
    signal = ActivationSignal.objects.filter(service=service, observed_at__gte=_fresh_after(now)).first()
    return (signal.pending, signal.at_gateway) if signal else (0, 0)


def _track_cold_start(state: PoolAutoscalerState, replicas: int, latest: dict) -> None:
    """A scale-up is timed from the decision to the first stored row showing the target count ready."""
    if state.scale_up_started_at is None:
        return
    if replicas < (state.scale_up_target or 0):
        state.scale_up_started_at, state.scale_up_target = None, None  # scaled down before it was ready
    elif latest["ready"] is not None and latest["ready"] >= state.scale_up_target:
        state.cold_start_s = max((latest["time"] - state.scale_up_started_at).total_seconds(), 0.0)
        state.scale_up_started_at, state.scale_up_target = None, None


# --- bounds: tenant quota and free GPUs of the type -------------------------------------------------------


def _capacity_room(service: InferenceService, pool: Pool) -> tuple[int | None, str]:
    """Replicas the free GPUs of the pool's type can place (None when the inventory is unknown)."""
    product = gpu_for(pool.gpu_type).product
    nodes = list(GpuNode.objects.filter(cluster_id=service.cluster_id, gpu_product=product, ready=True))
    if not GpuNode.objects.filter(cluster_id=service.cluster_id).exists():
        return None, "GPU inventory not observed yet"
    fitting = sum(n.free // pool.gpus_per_replica for n in nodes)
    room = fitting // pool.nodes_per_replica
    free = sum(n.free for n in nodes)
    words = f"{free} {product} GPUs free on {len(nodes)} node(s); a replica needs {pool.gpus_per_replica}"
    scheduler = _scheduler_reason(service)
    return room, f"{words} (scheduler: {scheduler})" if scheduler else words


def _scheduler_reason(service: InferenceService) -> str:
    observation = ServiceObservation.objects.filter(service=service).first()
    for event in (observation.events if observation else []):
        if event.get("reason") == "FailedScheduling":
            return event.get("message", "")
    return ""


def _bound(service, target: Target, current: int, desired: int) -> tuple[int, str, str, dict]:
    """(allowed desired, rule that bounded it or "", words, figures) for a scale-up."""
    pool = target.pool
    gpus_per = pool.gpus_per_replica * pool.nodes_per_replica
    quota_room, quota_words = quota_room_of(service, pool, gpus_per, target.other_gpus())
    capacity_room, capacity_words = _capacity_room(service, pool)
    figures = {"quota": quota_words, "capacity": capacity_words, "gpus_per_replica": gpus_per}
    allowed, rule, words = desired, "", ""
    if current + quota_room < allowed:
        allowed, rule = current + quota_room, ScalingRule.QUOTA
        words = f"tenant GPU quota: {quota_words}, +{desired - current} replicas need {(desired - current) * gpus_per}"
    if capacity_room is not None and current + capacity_room < allowed:
        allowed, rule, words = current + capacity_room, ScalingRule.CAPACITY, f"free GPUs: {capacity_words}"
    return allowed, rule, words, figures


# --- the evaluation -----------------------------------------------------------------------------------------


def evaluate_service(service_id: int, now: datetime | None = None, other_gpus: Callable[[], int] = lambda: 0,
                     between: bool = False) -> list[PoolOutcome]:
    """Evaluate every pool of one service (nothing when it is gone, deleting or not builtin); `other_gpus` counts
    the tenant's GPUs that no Pool row holds, for the quota bound. `between`: a surge check between the periodic
    evaluations instead (`apps.autoscaling.surge`: scale-up only, at Knative's panic rate)."""
    now = now or timezone.now()
    service = InferenceService.objects.select_related("tenant").filter(pk=service_id).first()
    if service is None or not service.autoscaled_by_builtin or service.is_deleting:
        return []
    pools = list(service.pools.all())

    def load(pk: int) -> Target:
        return replace(pool_target(service, Pool.objects.get(pk=pk)), other_gpus=other_gpus)

    return [evaluate_target(service, pool.role, lambda pk=pool.pk: load(pk), len(pools) > 1, now, between)
            for pool in pools]


def _observe(service: InferenceService, state: PoolAutoscalerState, target: Target, multi_pool: bool,
             now: datetime) -> tuple[Observation, dict, int]:
    """What the rules see of one target now (its cold start tracked first), the latest stored row and the requests
    the gateway holds for it at zero."""
    pool = target.pool
    latest = _latest(service, target.series_role or _series_role(service, pool, multi_pool), now)
    _track_cold_start(state, target.replicas, latest)
    pending, at_gateway = _pending_activation(service, now) if target.replicas == 0 else (0, 0)
    rates = target.rates() if target.rates else pool_rates(service, pool)
    obs = Observation(
        t=now.timestamp(), replicas=target.replicas, pods=_pods(service, target, now),
        ttft_p95_s=latest["ttft_p95"], itl_p95_s=latest["itl_p95"],
        idle_for_s=_idle_for(service, state, now) if target.min_replicas == 0 else None,
        pending_activation=pending, cold_start_s=cold_start_estimate(service, target.pool) or state.cold_start_s,
        rates=rates,
        **_target_load(service, target, now, rates), period_s=float(settings.AUTOSCALE_SECONDS),
    )
    return obs, latest, at_gateway


def _decision_signals(obs: Observation, latest: dict, at_gateway: int, forecast) -> dict:
    """What a decision stores of the figures it read."""
    return {"ttft_p95_s": obs.ttft_p95_s, "itl_p95_s": obs.itl_p95_s, "idle_for_s": obs.idle_for_s,
            "pending_activation": obs.pending_activation, "activation_at_gateway": at_gateway,
            "ready_replicas": latest["ready"],
            # Which TTFT the guard judges: above the prompts' prefill floor where it is measured.
            "ttft_definition": "budget" if obs.ttft_floor_p95_s is not None else "absolute_p95",
            "ttft_floor_p95_s": obs.ttft_floor_p95_s, "queue_time_p95_s": obs.queue_time_p95_s,
            "waiting_prompt_tokens": obs.waiting_prompt_tokens, "arrivals_per_s": obs.arrivals_per_s,
            "prompt_tokens_per_s": obs.prompt_tokens_per_s,
            "rates": obs.rates.as_dict() if obs.rates is not None else None, "forecast": _forecast_dict(forecast)}


@dataclass
class _Act:
    """What an evaluation did: the count, the action (None: nothing to record), the rule, why, and the history."""

    desired: int
    action: str | None
    rule: str
    reason: str
    history: History
    generation: int | None = None


def _act(service, target: Target, state: PoolAutoscalerState, ev, policy, signals: dict, now: datetime,
         act: _Act) -> None:
    """Make a change the evaluation asks for, within the tenant's quota and the free GPUs, and record it."""
    if act.desired > ev.current:
        allowed, bound_rule, words, figures = _bound(service, target, ev.current, act.desired)
        signals |= figures
        if allowed <= ev.current:
            act.desired, act.action, act.rule = ev.current, ScalingAction.BLOCKED, bound_rule
            act.reason = f"{act.reason}; blocked by {words}"
        elif allowed < act.desired:
            act.desired, act.rule = allowed, bound_rule
            act.reason = f"{act.reason}; bounded by {words} → {allowed}"
    if act.action is None:
        try:
            act.generation = target.scale(act.desired)
            act.action = ScalingAction.SCALED
        except (ServiceDeleting, ValidationError) as exc:
            act.desired, act.action, act.rule = ev.current, ScalingAction.BLOCKED, ScalingRule.SCALE_FAILED
            act.reason = f"{act.reason}; the scale failed: {exc}"
    if act.action != ScalingAction.SCALED:
        return
    act.history = record_scale(act.history, ev.t, ev.current, act.desired, policy.longest_period_s)
    state.last_scaled_at = now
    if act.desired > ev.current:
        if state.scale_up_started_at is None:
            state.scale_up_started_at = now
        state.scale_up_target = act.desired
        # The stable replicas queue for GPUs; a canary unit is counted by the rollout's own bound.
        admission = after_scale_up(service, target.pool.role, act.desired) if target.revision is None else ""
        if admission:
            act.reason, signals["admission"] = f"{act.reason}; {admission}", admission


def evaluate_target(service: InferenceService, key: str, load: Callable[[], Target], multi_pool: bool,
                    now: datetime, between: bool = False) -> PoolOutcome:
    """Evaluate one target (its autoscaler state is `key`); `load` reads its replicas once that state is locked,
    so two evaluations of one target never act on the same count. `between`: a surge check between the periodic
    evaluations, which changes nothing (not even the counts) unless it scales up."""
    with transaction.atomic():
        state, _ = PoolAutoscalerState.objects.get_or_create(service=service, pool=key)
        state = PoolAutoscalerState.objects.select_for_update().get(pk=state.pk)
        target = load()
        pool = target.pool
        policy = pool_policy(service.autoscaling, pool.role, target.min_replicas, target.max_replicas)
        obs, latest, at_gateway = _observe(service, state, target, multi_pool, now)
        if between:
            ev = surge(policy, obs, History.from_dict(state.history))
            if ev is None:
                return PoolOutcome(pool.role, target.replicas, target.replicas, None, "")
        else:
            ev = evaluate(policy, obs, History.from_dict(state.history))
        act = _Act(ev.desired, None, ev.rule, ev.reason, ev.history)
        if ev.binds and (answer := what_would_meet(service)):
            act.reason = f"{act.reason}; {answer}"
        # Sleep instead of zero (apps/autoscaling/sleeping.py): a sleeping pool keeps its replicas.
        step = None if between else idle_step(service, pool, ev, obs, obs.cold_start_s, now,
                                               target.revision is not None)
        if step is not None:
            act.desired, act.rule, act.reason = step.desired, step.rule, step.reason
        if target.words:
            act.reason = f"{target.words}: {act.reason}"
        if act.rule == ScalingRule.ACTIVATION and at_gateway:
            act.reason = f"{act.reason} (held at the gateway: {at_gateway})"
        signals = _decision_signals(obs, latest, at_gateway, ev.forecast)
        if step is not None and step.desired == ev.current:
            act.action = step.action  # put to sleep, woken, or asleep (None: counted, not stored)
        elif ev.changes:
            _act(service, target, state, ev, policy, signals, now, act)
        elif ev.held:
            act.action = ScalingAction.HELD
        if act.action is None:
            state.unchanged += 1
        else:
            ScalingDecision.objects.create(
                service=service, pool=pool.role, revision=target.revision, time=now, current_replicas=ev.current,
                desired_replicas=act.desired,
                raw_recommendation=ev.raw, stabilized=ev.stabilized, limited=ev.limited,
                metrics=[m.as_dict() for m in ev.metrics], signals=signals, rule=act.rule, action=act.action,
                reason=act.reason, cold_start_s=state.cold_start_s, generation=act.generation,
            )
        state.history = act.history.as_dict()
        state.evaluations += 0 if between else 1
        state.last_evaluated_at = now
        state.save()
    return PoolOutcome(pool.role, ev.current, act.desired, act.action, act.reason)


def _forecast_dict(forecast) -> dict | None:
    if forecast is None:
        return None
    return {"prompt_tps": round(forecast.prompt_tps, 1), "arrivals_per_s": round(forecast.arrivals_per_s, 3),
            "horizon_s": round(forecast.horizon_s, 1), "trusted": forecast.trusted, "words": forecast.words}


def prune_decisions(now: datetime | None = None) -> int:
    """Delete decisions older than AUTOSCALE_DECISION_RETENTION_DAYS; returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.AUTOSCALE_DECISION_RETENTION_DAYS)
    return ScalingDecision.objects.filter(time__lt=cutoff).delete()[0]
