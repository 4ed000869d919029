"""The rollout controller: every ROLLOUT_SECONDS (beat, workers/tasks/rollout.py) each running rollout whose
window has lasted its step's minimum duration is judged, and the decision is stored and acted on.

A window is judged by `apps.rollouts.analysis.analyse` on the requests both revisions served in it, as the gateway
metered them (`gateway.UsageRow`, one row per request naming the pod that served it: a pod of the canary unit
`<service>-r<N>-…` is the canary's, any other the stable one's), or when it metered no requests of one of them, on
the revisions' engine histograms as the scraper kept them (apps/rollouts/engine_samples.py); the canary's readiness
comes from what the reconciler last saw of its pods. An inconclusive window extends the step (the next window adds
to its samples), a pass advances (or promotes after the last step below 100 %), a fail rolls back: the service is
set back to the stable revision (`actions.rollback`, audited as the controller) and the canary unit is pruned.

Every change of step, promotion or rollback changes what the cluster should run, so it bumps the service's
generation and enqueues a reconcile (which renders it through apps/rollouts/plan.py and prunes what is no
longer rendered).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.core.choices import AuditVia
from apps.gateway.models import UsageRow
from apps.rollouts.analysis import (
    Action,
    Analysis,
    Readiness,
    Sample,
    StepState,
    Thresholds,
    analyse,
    decide,
    requests_ahead,
)
from apps.rollouts.choices import RolloutPhase, Verdict
from apps.rollouts.engine_samples import ENGINE_BUCKETS, paired, samples_from_window
from apps.rollouts.models import Rollout, RolloutDecision, StableRevision
from apps.rollouts.units import sizes_for_step
from apps.serving.actions import ServiceDeleting, rollback
from apps.serving.dispatch import enqueue_reconcile
from apps.serving.models import InferenceService, Pool, ServiceObservation
from apps.serving.names import canary_name
from apps.serving.revisions import RollbackRefused
from apps.serving.rollout_spec import canary_setting
from apps.telemetry.models import CANARY_ROLE, STABLE_ROLE
from apps.telemetry.revisions import engine_window

log = logging.getLogger(__name__)
CONTROLLER_ACTOR = "rollout:controller"
ENGINE_SOURCE = ("judged on the engines' histograms: no metered requests of both revisions in the window; TTFT paired "
                 "with prompt lengths by rank")
ENGINE_SOURCE_UNPAIRED = ("judged on the engines' histograms: no metered requests of both revisions in the window; "
                          "no prompt-length histogram, so TTFT over all prompt lengths")
CRASH_RESTARTS = 2  # a canary pod restarted this often (or in CrashLoopBackOff) fails the rollout at once


def thresholds_for(rollout: Rollout, service: InferenceService) -> Thresholds:
    """The strategy's tolerance and minimum requests; the service's TTFT / ITL targets as absolute limits."""
    targets = (service.autoscaling or {}).get("targets") or {}
    return Thresholds(tolerance=canary_setting(rollout.strategy, "tolerance"),
                      min_requests=canary_setting(rollout.strategy, "min_requests"),
                      ttft_p95_slo_s=targets.get("ttft_p95_seconds"), itl_p95_slo_s=targets.get("itl_p95_seconds"))


def sample_of(row: dict, ahead: int | None = None) -> Sample:
    """One metered request as the analysis reads it: TTFT, mean inter-token latency, errors (5xx), and the requests
    ahead of it on its pod."""
    error = row["status"] >= 500
    ttft = row["ttft_ms"] / 1000 if row["ttft_ms"] is not None and not error else None
    itl = None
    if ttft is not None and row["completion_tokens"] > 1:
        itl = max(row["duration_ms"] - row["ttft_ms"], 0) / 1000 / (row["completion_tokens"] - 1)
    return Sample(prompt_tokens=row["prompt_tokens"], ttft_s=ttft, itl_s=itl, cached_tokens=row["cached_tokens"],
                  error=error, ahead=ahead)


def window_samples(rollout: Rollout, start: datetime, end: datetime) -> tuple[list[Sample], list[Sample], str]:
    """(canary, stable, source) samples of the requests the service served from `start` to `end`: the requests the
    gateway metered when they include both revisions' (they pair each request's prompt with its TTFT; source ""),
    else the revisions' engine histograms (apps/rollouts/engine_samples.py; source ENGINE_SOURCE, or
    ENGINE_SOURCE_UNPAIRED when either revision's engines exported no prompt-length histogram): nobody called the
    service through the gateway, or its rows name a router that does not say which engine served."""
    canary, stable = metered_samples(rollout, start, end)
    if canary and stable:
        return canary, stable, ""
    windows = [engine_window(rollout.service_id, role, start, end) for role in (CANARY_ROLE, STABLE_ROLE)]
    source = ENGINE_SOURCE if all(paired(window) for window in windows) else ENGINE_SOURCE_UNPAIRED
    return samples_from_window(windows[0]), samples_from_window(windows[1]), source


def metered_samples(rollout: Rollout, start: datetime, end: datetime) -> tuple[list[Sample], list[Sample]]:
    """(canary, stable) samples of the requests the gateway metered from `start` to `end`, each with the metered
    requests ahead of it on its pod (sent before it, no first token yet; a row's `at` is when the request ended,
    `duration_ms` before it started), so TTFT is compared between requests that met the same load on their pod."""
    prefix = canary_name(rollout.service.name, rollout.to_revision) + "-"
    # By tenant and time first: the (tenant, at) index picks the window, the service and pod filter the rest.
    rows = list(UsageRow.objects.filter(tenant_id=rollout.service.tenant_id, at__gte=start, at__lt=end,
                                        service_id=rollout.service_id).exclude(pod="").values(
        "pod", "at", "status", "ttft_ms", "duration_ms", "prompt_tokens", "cached_tokens", "completion_tokens"))
    loads = requests_ahead([_span(row) for row in rows])
    canary, stable = [], []
    for row, load in zip(rows, loads, strict=True):
        (canary if row["pod"].startswith(prefix) else stable).append(sample_of(row, load))
    return canary, stable


def _span(row: dict) -> tuple[str, float, float]:
    """(pod, sent, first token or end) of a metered row, in seconds."""
    ended = row["at"].timestamp()
    sent = ended - row["duration_ms"] / 1000
    return row["pod"], sent, sent + row["ttft_ms"] / 1000 if row["ttft_ms"] is not None else ended


def readiness(rollout: Rollout, now: datetime) -> Readiness:
    """From what the reconciler last saw of the canary unit's pods: crash-looping (a pod in CrashLoopBackOff or
    restarted CRASH_RESTARTS times), or never ready (no pod ready ROLLOUT_READY_SECONDS after the rollout began)."""
    pods = ServiceObservation.objects.filter(service_id=rollout.service_id).values_list("pods", flat=True).first()
    prefix = canary_name(rollout.service.name, rollout.to_revision) + "-"
    mine = [p for p in pods or [] if str(p.get("name", "")).startswith(prefix)]
    for pod in mine:
        if pod.get("reason") == "CrashLoopBackOff" or (pod.get("restarts") or 0) >= CRASH_RESTARTS:
            return Readiness(crash_looping=True, detail=f"{pod['name']}: {pod.get('reason') or 'restarting'}, "
                                                        f"{pod.get('restarts') or 0} restarts")
    waited = (now - rollout.created).total_seconds()
    if waited >= settings.ROLLOUT_READY_SECONDS and not any(p.get("ready") for p in mine):
        why = next((f"{p['name']}: {p.get('reason')}" + (f": {p['message']}" if p.get("message") else "")
                    for p in mine if p.get("reason")), f"{len(mine)} pod(s), none ready")
        return Readiness(never_ready=True, detail=f"no pod of {prefix[:-1]} ready {waited:.0f} s after the rollout "
                                                  f"began; {why}")
    return Readiness()


def step_all(now: datetime | None = None) -> int:
    """Judge every running rollout that is due; returns how many were judged."""
    now = now or timezone.now()
    judged = 0
    for rollout_id in Rollout.objects.filter(phase=RolloutPhase.RUNNING).values_list("pk", flat=True):
        try:
            judged += bool(step_rollout(rollout_id, now))
        except Exception:
            log.exception("rollout %s: stepping failed", rollout_id)
    return judged


def step_rollout(rollout_id: int, now: datetime | None = None) -> RolloutDecision | None:
    """Judge one rollout's window if it is due (or its canary crash-loops) and act; None when not due."""
    now = now or timezone.now()
    with transaction.atomic():
        rollout = (Rollout.objects.select_for_update().select_related("service")
                   .filter(pk=rollout_id, phase=RolloutPhase.RUNNING).first())
        if rollout is None:
            return None
        step = rollout.steps[rollout.step]
        ready = readiness(rollout, now)
        failing = ready.crash_looping or ready.never_ready
        due = now - rollout.window_started_at >= timedelta(seconds=step["min_duration_seconds"])
        if not due and not failing:
            return None
        last = rollout.steps[rollout.step + 1]["weight"] == 100
        source = ""
        if step["analysis"] or failing:
            canary, stable, source = window_samples(rollout, rollout.step_started_at, now)
            thresholds = thresholds_for(rollout, rollout.service)
            if source == ENGINE_SOURCE_UNPAIRED:
                thresholds = replace(thresholds, buckets=ENGINE_BUCKETS)
            # Said only where the engines' figures decided (a readiness failure needs none).
            source = source if (canary or stable) and not failing else ""
            result = analyse(canary, stable, ready, thresholds)
        else:
            result = Analysis(Verdict.PASS, "this step has no analysis; its minimum duration has passed", 0, 0)
        state = StepState(last_step=last, inconclusive_count=rollout.extensions,
                          max_extensions=canary_setting(rollout.strategy, "max_extensions"),
                          when_exhausted=Action(canary_setting(rollout.strategy, "when_exhausted")))
        action = decide(result.verdict, state)
        decision = RolloutDecision.objects.create(
            rollout=rollout, service=rollout.service, time=now, step=rollout.step, weight=step["weight"],
            window_start=rollout.step_started_at, window_end=now, verdict=str(result.verdict),
            action=action.value, reason=_reason(result, action, rollout, source), metrics=result.as_dict()["metrics"],
            canary_requests=result.canary_requests, stable_requests=result.stable_requests,
            actor_repr=CONTROLLER_ACTOR)
        _act(rollout, action, decision.reason, now)
    if action == Action.ROLL_BACK:
        restore_stable(rollout)
    return decision


def _reason(result: Analysis, action: Action, rollout: Rollout, source: str = "") -> str:
    then = {
        Action.ADVANCE: f"advancing to {rollout.steps[rollout.step + 1]['weight']} %",
        Action.EXTEND: "extending the window (its requests count with the next one's)",
        Action.HOLD: "holding until a person resumes, promotes or aborts",
        Action.PROMOTE: f"promoting revision {rollout.to_revision}",
        Action.ROLL_BACK: f"rolling back to revision {rollout.from_revision}",
    }[action]
    said = f" ({source})" if source else ""
    return f"{str(result.verdict).capitalize()}{said}: {result.reason}; {then}."


def _act(rollout: Rollout, action: Action, reason: str, now: datetime) -> None:
    changed = ["reason"]
    rollout.reason = reason
    if action == Action.EXTEND:
        rollout.extensions += 1
        rollout.window_started_at = now
        changed += ["extensions", "window_started_at"]
    elif action == Action.ADVANCE:
        stable = dict(Pool.objects.filter(service_id=rollout.service_id).values_list("role", "replicas"))
        rollout.canary_replicas = sizes_for_step(stable, rollout.canary_replicas, rollout.weight,
                                                 rollout.steps[rollout.step + 1]["weight"])
        rollout.step += 1
        rollout.extensions = 0
        rollout.step_started_at = rollout.window_started_at = now
        changed += ["step", "extensions", "step_started_at", "window_started_at", "canary_replicas"]
    elif action == Action.HOLD:
        rollout.phase = RolloutPhase.PAUSED
        changed.append("phase")
    elif action in (Action.PROMOTE, Action.ROLL_BACK):
        rollout.phase = RolloutPhase.PROMOTED if action == Action.PROMOTE else RolloutPhase.ROLLED_BACK
        rollout.finished_at = now
        changed += ["phase", "finished_at"]
        if action == Action.PROMOTE:
            StableRevision.objects.filter(service_id=rollout.service_id).update(revision=rollout.to_revision)
    rollout.save(update_fields=changed)
    if action in (Action.ADVANCE, Action.PROMOTE, Action.ROLL_BACK):
        rerender(rollout.service_id)


def rerender(service_id: int) -> int | None:
    """What the cluster should run changed (a weight, a unit): a new generation (returned), reconciled after
    commit."""
    InferenceService.objects.filter(pk=service_id).update(generation=F("generation") + 1)
    enqueue_reconcile(service_id)
    return InferenceService.objects.filter(pk=service_id).values_list("generation", flat=True).first()


def restore_stable(rollout: Rollout, actor=None, via: str = AuditVia.SYSTEM) -> None:
    """Set the service back to the stable revision's spec (a new revision, audited); when that save is refused the
    renderer keeps running the stable revision alone (apps/rollouts/plan.py) and the refusal is logged."""
    service = rollout.service
    try:
        rollback(service, rollout.from_revision, actor=actor, via=via, actor_label="" if actor else CONTROLLER_ACTOR)
    except (RollbackRefused, ServiceDeleting, ValidationError) as exc:
        log.warning("rollout %s: the service stays at revision %s, run as %s: %s", rollout.pk, rollout.to_revision,
                    rollout.from_revision, exc)
        return
    latest = service.revisions.order_by("-number").values_list("number", flat=True).first()
    StableRevision.objects.filter(service=service).update(revision=latest)

