"""Stored what-if objects: uploading a trace, starting, running and cancelling a run.

The API, the portal and the worker call these; the worker's task (`workers.tasks.whatif.run`) is `execute`.
Validation happens before anything is stored: a trace with a bad row, an alternative the service's own
validation refuses, or a recorded window without load is a ValidationError naming the field, and writes nothing.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.core.audit import record_change
from apps.core.choices import AuditAction
from apps.serving.models import InferenceService
from apps.whatif import calibration
from apps.whatif.lab import (
    RECORDED_WINDOW,
    Load,
    LoadError,
    build_scenarios,
    check_size,
    recorded_load,
    run_whatif,
)
from apps.whatif.models import Calibration, Run, RunStatus, Trace
from apps.whatif.scenarios import ScenarioError, scenario
from apps.whatif.search import SEARCH_CPU_BUDGET_S, search
from capacity.traces import TraceError, parse_trace
from controlplane.celery import app as celery_app
from controlplane.tasknames import WHATIF_RUN

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 0.5  # the running task writes its progress (and reads a cancel) at most this often


class Cancelled(Exception):
    """The run was cancelled while it ran."""


def upload_trace(*, tenant, name: str, fmt: str, data: bytes, actor, via) -> Trace:
    """Parse an uploaded trace and store it for `tenant`; a bad row, an unknown format, a clash of names or an
    upload over WHATIF_TRACE_MAX_BYTES raises ValidationError and stores nothing."""
    limit = settings.WHATIF_TRACE_MAX_BYTES
    if len(data) > limit:
        raise ValidationError({"file": f"The trace is larger than {limit} bytes, the most that may be uploaded "
                                       "(WHATIF_TRACE_MAX_BYTES)."})
    trace = Trace(tenant=tenant, name=name, format=fmt, data=data, size_bytes=len(data), requests=0,
                  duration_s=0.0, created_by=actor if getattr(actor, "pk", None) else None)
    trace.full_clean(exclude=["data", "size_bytes", "requests", "duration_s", "summary"])
    try:
        parsed = parse_trace(data, fmt, max_bytes=limit)
    except TraceError as exc:
        raise ValidationError({"file": exc.problems}) from None
    if not parsed.requests:
        raise ValidationError({"file": "The trace holds no request."})
    trace.requests, trace.duration_s, trace.summary = len(parsed.requests), parsed.duration_s, parsed.summary()
    with transaction.atomic():
        trace.save()
        record_change(actor=actor, obj=trace, action=AuditAction.CREATE, via=via)
    return trace


def load_of(run: Run) -> Load:
    """The run's load: its trace parsed again, or the service's recorded window."""
    if run.trace_id is not None:
        trace = run.trace
        parsed = parse_trace(bytes(trace.data), trace.format, max_bytes=max(len(trace.data), 1))
        return Load(f"trace:{trace.format}", parsed.requests)
    return recorded_load(run.service, run.window_end - run.window_start, until=run.window_end)


def start_run(*, service, trace: Trace | None, alternatives: list | None, actor, via, search: bool = False) -> Run:
    """Check the run (the trace is the service's tenant's; the alternatives pass the service's own validation, or
    a search has none; a recorded window has load; the load is no larger than a run replays), store it queued,
    audit it, and hand it to a worker once committed."""
    if trace is not None and trace.tenant_id != service.tenant_id:
        raise ValidationError({"trace": "The trace belongs to another tenant than the service."})
    _check_scenarios(service, alternatives, search)
    now = timezone.now()
    run = Run(service=service, trace=trace, alternatives=alternatives, search=search,
              cpu_budget_s=float(SEARCH_CPU_BUDGET_S if search else settings.WHATIF_CPU_BUDGET_SECONDS),
              created_by=actor if getattr(actor, "pk", None) else None)
    if trace is None:
        run.window_start, run.window_end = now - RECORDED_WINDOW, now
    try:
        if trace is None:
            load = recorded_load(service, RECORDED_WINDOW, until=now)
            check_size(len(load.requests), load.duration_s)
        else:
            check_size(trace.requests, trace.duration_s)
    except LoadError as exc:
        raise ValidationError({"trace": str(exc)}) from None
    with transaction.atomic():
        run.save()
        record_change(actor=actor, obj=run, action=AuditAction.CREATE, via=via)
        transaction.on_commit(lambda: _send(run.pk))
    return run


def _check_scenarios(service, alternatives: list | None, search: bool) -> None:
    if search and alternatives:
        raise ValidationError({"alternatives": "A search chooses its own configurations; leave alternatives out."})
    try:
        if search:
            scenario(service, {}, "current")
        else:
            build_scenarios(service, alternatives)
    except ScenarioError as exc:
        raise ValidationError({"service" if search else "alternatives": exc.problems}) from None


def _send(run_id: int) -> None:
    try:
        celery_app.send_task(WHATIF_RUN, args=[run_id], retry=False, ignore_result=True)
    except Exception:  # the broker is down: the run says so rather than waiting forever
        log.warning("Could not enqueue what-if run %s.", run_id)
        Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
            status=RunStatus.FAILED, finished_at=timezone.now(),
            message="The run could not be handed to a worker (the broker is unreachable); start it again.")


def cancel_run(run: Run, *, actor, via) -> Run:
    """Cancel a run: a queued one at once, a running one at its next progress check; a finished one is a
    ValidationError (nothing to cancel)."""
    if run.finished:
        raise ValidationError({"status": f"The run has finished ({run.get_status_display()}); nothing to cancel."})
    with transaction.atomic():
        before = {"status": run.status, "cancel_requested": run.cancel_requested}
        queued = Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            status=RunStatus.CANCELLED, cancel_requested=True, finished_at=timezone.now(),
            message="Cancelled before it started.")
        if not queued:
            Run.objects.filter(pk=run.pk).update(cancel_requested=True)
        run.refresh_from_db()
        record_change(actor=actor, obj=run, action=AuditAction.UPDATE, via=via, before=before,
                      after={"status": run.status, "cancel_requested": True})
    return run


def execute(run_id: int) -> str | None:
    """Run a queued run (the worker's task): claim it, replay, store the result. Returns its final status, or
    None when it was not queued (already claimed, cancelled or gone)."""
    claimed = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=timezone.now())
    if not claimed:
        return None
    run = Run.objects.select_related("service", "trace").get(pk=run_id)
    service = InferenceService.objects.with_related().get(pk=run.service_id)
    last = [0.0]

    def progress(fraction: float) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        Run.objects.filter(pk=run_id).update(progress=round(fraction, 4))
        if Run.objects.filter(pk=run_id, cancel_requested=True).exists():
            raise Cancelled

    fields: dict = {}
    load = None
    try:
        load = load_of(run)
        if run.search:
            result = searched(service, load, run.cpu_budget_s, progress)
        else:
            result = run_whatif(service, load, run.alternatives, cpu_budget_s=run.cpu_budget_s, progress=progress)
    except Cancelled:
        fields = {"status": RunStatus.CANCELLED, "message": "Cancelled while it ran."}
    except (LoadError, ScenarioError, TraceError) as exc:
        fields = {"status": RunStatus.FAILED, "message": str(exc)}
    except Exception:
        log.exception("what-if run %s failed", run_id)
        fields = {"status": RunStatus.FAILED,
                  "message": "The run failed with an internal error (see the worker's log)."}
    else:
        # A search that ran out of budget still has a front of what it replayed: it succeeded, and says so.
        stopped = None if run.search else result["stopped"]
        fields = {"status": RunStatus.STOPPED if stopped else RunStatus.SUCCEEDED, "result": result,
                  **({} if stopped else {"progress": 1.0}),
                  "message": stopped or result.get("summary")
                  or f"{len(result['scenarios'])} scenarios replayed in {result['wall_s']:.1f} s."}
    with transaction.atomic():
        Run.objects.filter(pk=run_id).update(finished_at=timezone.now(), **fields)
        if fields.get("result") and load is not None and load.start is not None and result["scenarios"]:
            calibrate(run, service, load, result["scenarios"][0])
    return fields["status"]


def searched(service, load: Load, cpu_budget_s: float, progress) -> dict:
    """A search's result as a run keeps it: `scenarios` are the current configuration and the front (so the panel
    and *Apply* read it as any run's), and `summary` says in a sentence what was found."""
    result = search(service, load, cpu_budget_s=cpu_budget_s, progress=progress)
    scenarios = ([result["current"]] if result["current"] else []) + result["front"]
    chosen = result["chosen"]
    summary = (f"{result['replayed']} configurations replayed, {len(result['pruned'])} pruned by the planner, in "
               f"{result['wall_s']:.1f} s; " + (f"the cheapest meeting the SLO: {chosen['name']}." if chosen
                                                 else result["reason"] + "."))
    if result["stopped"]:
        summary += f" ({result['stopped']}.)"
    return {**result, "scenarios": scenarios, "summary": summary}


def calibrate(run: Run, service, load: Load, current: dict) -> Calibration | None:
    """Keep the replay of the current configuration against what the series showed over the load's window
    (None when the series holds too little of it)."""
    obs = calibration.observed(service, load.start, load.duration_s, current["gpus_per_replica"])
    if obs is None:
        return None
    pred = calibration.predicted(current)
    return Calibration.objects.create(
        service=service, run=run, window_start=load.start,
        window_end=load.start + timedelta(seconds=load.duration_s), predicted=calibration.rounded(pred),
        observed=calibration.rounded(obs), errors_pct=calibration.errors_pct(pred, obs))


LOST_AFTER_BUDGETS = 4  # a run still running this many CPU budgets (of wall time) after it started has lost its worker
LOST_AFTER_MIN_S = 600


def fail_lost_runs(now=None) -> int:
    """Runs whose worker died mid-run (the task is not acknowledged late, so no one replays it): still
    `running` long after their CPU budget could have been spent, even on a busy worker. Marked failed with
    the reason, so they stop looking alive; returns how many."""
    now = now or timezone.now()
    lost = 0
    for run in Run.objects.filter(status=RunStatus.RUNNING, started_at__isnull=False):
        allowed = max(LOST_AFTER_MIN_S, LOST_AFTER_BUDGETS * run.cpu_budget_s)
        if (now - run.started_at).total_seconds() > allowed:
            lost += Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
                status=RunStatus.FAILED, finished_at=now,
                message=f"Lost: no result {allowed:.0f} s after it started (its worker stopped); start it again.")
    return lost
