"""One reconcile pass of one service: claim, render, apply, prune, read back, write status.

Level-based and idempotent: it computes the desired objects from the database, converges the cluster
on them with the fewest writes (`Kube.sync`), and writes what it observed. Doing it twice changes
nothing. Slow cluster I/O never runs inside a database transaction; the claim is a PostgreSQL
advisory lock held on the worker's own connection, so a dead worker releases it with its connection.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError
from django.db.models import F, Q
from django.utils import timezone

from apps.rollouts.plan import desired_spec
from apps.serving.actions import finalize_deletion
from apps.serving.admission import admit_cluster, admitted_replicas, gate, record_workloads
from apps.serving.choices import Phase, ReconcileResult
from apps.serving.dispatch import enqueue_reconcile
from apps.serving.models import InferenceService, Pool, ReconcileRun, ServiceObservation
from apps.serving.names import service_selector, tenant_namespace
from apps.serving.rendering import render_service, service_endpoint, service_objects
from apps.serving.rendering.kueue import API as KUEUE_API
from apps.serving.startup import record as record_startups
from capacity.gpus import gpu_for
from controlplane import logcontext
from workers import status as st
from workers.adaptersync import sync_service_adapters
from workers.inventory import observe_nodes
from workers.kube import Kube, kube_for
from workers.kubeerrors import ClusterError, PermanentClusterError
from workers.locks import advisory_lock
from workers.tenantsecrets import sync_hf_token

log = logging.getLogger(__name__)

LOCK_NAMESPACE = 0x5EC0  # first key of the two-int advisory lock; the second is the service id
MANAGED_KINDS = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
)
WORKLOAD_KINDS = {"Deployment", "LeaderWorkerSet"}
KUEUE_WORKLOAD = (KUEUE_API, "Workload")  # Kueue's record of a pod's or a group's admission
# What a workload's pods need when they are created (their identity, its permissions, mounted configuration):
# applied before the workloads. Everything else of the service goes out with the workloads in one wave.
WORKLOAD_NEEDS = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret"}
AUTOSCALER_KINDS = {"HorizontalPodAutoscaler", "ScaledObject"}  # their status is read back for the page
REQUEUE_WHILE_DEPLOYING = 3.0
REQUEUE_WHILE_FAILING = 15.0

@dataclass
class Outcome:
    """What a pass did and whether the service wants another look soon."""

    service_id: int
    result: ReconcileResult
    applied: int = 0
    pruned: int = 0
    requeue_after: float | None = None
    message: str = ""
    duration_s: float = 0.0
    generation: int = 0
    record: bool = False  # worth a ReconcileRun row (changed something, failed, or not converged)


def reconcile(service_id: int, look: bool = False) -> Outcome:
    """Run one pass for the service; raise TransientClusterError for the caller to retry.

    `look` is a pass that only comes back to see how a rollout is going: unless the spec moved on meanwhile
    it converges the workloads and their autoscalers alone (the kinds the status is read from) and skips the
    other kinds and the shared objects, which the previous pass applied and the drift checks keep."""
    started, started_at = time.monotonic(), timezone.now()
    with advisory_lock(LOCK_NAMESPACE, service_id) as held:
        if not held:
            # Another worker is on it; if the spec moved on meanwhile, its pass leaves the service behind
            # (observed < generation) and the resync picks it up. Requeueing here would only multiply tasks.
            return Outcome(service_id, ReconcileResult.BUSY)
        try:
            service = InferenceService.objects.select_related("cluster", "tenant").get(pk=service_id)
        except InferenceService.DoesNotExist:
            return Outcome(service_id, ReconcileResult.GONE)
        # Bound until the task ends (task_postrun clears it), so the task's summary line carries them too.
        logcontext.update(tenant=service.tenant.slug, service=f"{service.tenant.slug}/{service.name}")
        try:
            with kube_for(service.cluster).pass_deadline(settings.RECONCILE_PASS_DEADLINE_SECONDS):
                outcome = _delete(service) if service.is_deleting else _converge(service, look)
        except (ClusterError, DatabaseError):
            raise  # classified cluster errors are retried or reported by the task; the database comes back
        except Exception as exc:
            # A bug or absurd stored data (an OverflowError, say) must not crash the task on every resync:
            # it becomes a Failed condition with the message, and waits for the next spec change.
            log.exception("reconcile %s: unexpected error", service_id)
            outcome = _write_failure(service, service.generation, "InternalError",
                                     f"{exc.__class__.__name__}: {exc}")
    outcome.duration_s = time.monotonic() - started
    if outcome.record:
        ReconcileRun.objects.create(
            service_id=service_id, started_at=started_at, generation=outcome.generation, result=outcome.result,
            applied=outcome.applied, pruned=outcome.pruned, duration_ms=round(outcome.duration_s * 1000),
            message=outcome.message[:2000],
        )
    return outcome


def due_for_resync(now=None):
    """Services the periodic resync should enqueue (none with a reconcile queued already): never reconciled
    for one resync interval after they were created, due for a drift check, or behind their spec / being
    deleted but not touched in the last tick. Services touched in the last tick are in flight already
    (on-commit enqueue, self-requeue while deploying); enqueueing them again would only pile up duplicate
    tasks.

    A drift check is due one tick before the service was last checked one interval ago: a tick spreads its
    checks over the tick, so one checked late in a tick is one interval old by the tick that checks it next;
    waiting for the full interval at the tick itself would make every interval one tick longer."""
    now = now or timezone.now()
    interval, tick = settings.RECONCILE_RESYNC_SECONDS, settings.RESYNC_TICK_SECONDS
    recent = now - timedelta(seconds=tick)
    stale = now - timedelta(seconds=interval)
    check = now - timedelta(seconds=max(interval - tick, 0))
    behind = Q(observed_generation__lt=F("generation")) | Q(deletion_requested_at__isnull=False)
    lost = now - timedelta(seconds=settings.RECONCILE_QUEUED_EXPIRY_SECONDS)
    return InferenceService.objects.filter(
        # A new service was enqueued when it was saved; resync takes it only if that task got lost (not
        # seen for one interval), or a backlog of new services would be enqueued again every tick.
        Q(last_reconciled_at__isnull=True, created__lt=stale)
        | Q(last_reconciled_at__lt=check)
        | (behind & Q(last_reconciled_at__lt=recent))
    ).filter(Q(queued_at__isnull=True) | Q(queued_at__lt=lost))


def _delete(service) -> Outcome:
    """Remove the service's objects from the cluster, then the row."""
    kube = kube_for(service.cluster)
    namespace = tenant_namespace(service.tenant.slug)
    result = kube.sync([], selector=service_selector(service.uid), managed_kinds=MANAGED_KINDS, namespace=namespace)
    remaining = kube.list("v1", "Pod", namespace=namespace, label_selector=service_selector(service.uid))
    if remaining and result.pruned:
        # Pods go with their owners; look again shortly rather than wait here.
        return Outcome(service.pk, ReconcileResult.PROGRESSING, pruned=len(result.pruned),
                       requeue_after=REQUEUE_WHILE_DEPLOYING)
    finalize_deletion(service)
    return Outcome(service.pk, ReconcileResult.DELETED, pruned=len(result.pruned))


def _converge(service, look: bool = False) -> Outcome:
    generation = service.generation
    kube = kube_for(service.cluster)
    try:
        spec = gate(desired_spec(service), _admit(service))  # with the canary unit while a rollout runs
        if not spec.api_server_cidrs:
            spec = replace(spec, api_server_cidrs=kube.api_server_cidrs())
        objects = render_service(spec)
    except ValueError as exc:  # RenderError and invalid stored settings: permanent until the spec changes
        return _write_failure(service, generation, "RenderFailed", str(exc))
    labelled = service_objects(objects)
    shared = [o for o in objects if o not in labelled]
    # Objects of kinds no longer desired can exist only after a spec change (or an interrupted pass,
    # which leaves the service behind too): only then are all kinds listed for pruning.
    behind = service.observed_generation < generation
    if look and not behind:
        labelled = [o for o in labelled if o["kind"] in WORKLOAD_KINDS | AUTOSCALER_KINDS]
        shared = []
    try:
        result = kube.sync(labelled, selector=service_selector(service.uid),
                           managed_kinds=MANAGED_KINDS if behind else (), namespace=spec.namespace, unlabelled=shared,
                           recheck_unlabelled_after=settings.RECONCILE_RESYNC_SECONDS,
                           apply_first=WORKLOAD_NEEDS)
        sync_hf_token(kube, service.tenant, spec.namespace)  # its pods' HF_TOKEN (not a rendered object)
    except PermanentClusterError as exc:
        return _write_failure(service, generation, "ApplyFailed", exc.message)
    workloads = [obj for ref, obj in result.live.items() if ref.kind in WORKLOAD_KINDS]
    autoscalers = st.autoscaler_rows([obj for ref, obj in result.live.items() if ref.kind in AUTOSCALER_KINDS])
    pods = kube.list("v1", "Pod", namespace=spec.namespace, label_selector=service_selector(service.uid), cached=True)
    if service.cluster.kueue_installed:
        _read_admission(kube, service, spec.namespace)
    desired = {p.role: p.replicas for p in spec.pools}
    view = st.service_view(desired, workloads, pods, [])
    # Events matter while something changes: after a write, while a pod cannot be placed or crashes, and
    # when a pod moved on since the last look. A service whose pods stand as they stood keeps the events
    # it last saw, which spares the API server one read per object and pass (most of a look's reads when
    # a slow rollout is looked at again and again).
    current = ServiceObservation.objects.filter(service_id=service.pk).values(
        "pools", "pods", "events", "drift", "autoscalers", "startups", "adapters").first()
    unchanged = (current is not None and current["pods"] == [vars(p) for p in view.pods]
                 and not any(p.phase == "Pending" and not p.node for p in view.pods) and not view.crashing)
    # All ready is no reason to skip a look whose pods moved on: a replica that started between two passes has its
    # start-up phases in its events (apps/serving/startup.py), read then or never.
    steady = unchanged and not result.applied and not result.pruned
    # Nor is there anything to tell yet in the pass that has just applied a service's objects and sees none of
    # its pods: the look that finds them (the pods moved on) reads the events.
    quiet = steady or (bool(result.applied) and not view.pods)
    events = None if quiet else _events_of(kube, spec.namespace,
                                            [p.name for p in view.pods] + [w["metadata"]["name"] for w in workloads])
    if events:
        view = st.service_view(desired, workloads, pods, events)
    advice = _advice(kube, spec, view) if view.unschedulable else ""
    crash = _crash_detail(kube, service, spec.namespace, view) if view.crashing else ""
    phase, conditions, requeue = _judge(service, view, advice, crash)
    adapters = sync_service_adapters(kube.core, service, spec, pods)
    if adapters.condition is not None:
        conditions.append(adapters.condition)
    endpoint = service_endpoint(spec)
    _write_status(service, generation, phase, conditions, view, endpoint)
    cause = "drift" if service.observed_generation == generation else "update"
    found = st.now_iso()
    _write_observation(service, view, [
        {"object": str(ref), "diff": diff, "cause": cause, "found_at": found} for ref, diff in result.drift.items()
    ], current, keep_events=events is None, autoscalers=autoscalers, adapters=adapters.held)
    outcome = Outcome(service.pk, ReconcileResult.CONVERGED if phase == Phase.READY else
                      (ReconcileResult.FAILED if phase == Phase.FAILED else ReconcileResult.PROGRESSING),
                      applied=len(result.applied), pruned=len(result.pruned), requeue_after=requeue,
                      message="; ".join(view.unschedulable + view.crashing), generation=generation)
    outcome.record = bool(outcome.applied or outcome.pruned or phase != service.phase
                          or outcome.result != ReconcileResult.CONVERGED)
    return outcome


def _admit(service) -> dict[str, int] | None:
    """Replicas per pool the service may run: on a cluster without Kueue, what the control plane's admission pass
    admitted (other services whose share changed are reconciled too); None where Kueue admits them itself."""
    if service.cluster.kueue_installed:
        return None
    changed, _plan = admit_cluster(service.cluster)
    for other in changed:
        if other != service.pk:
            enqueue_reconcile(other)
    service.refresh_from_db(fields=["admission"])
    return admitted_replicas(service)


def _read_admission(kube: Kube, service, namespace: str) -> None:
    """Where Kueue admits the pods: what its Workloads of this service's pods say (they carry the pods' labels)."""
    try:
        workloads = kube.list(KUEUE_WORKLOAD[0], KUEUE_WORKLOAD[1], namespace=namespace,
                              label_selector=service_selector(service.uid))
    except ClusterError as exc:  # the next pass reads them again; the page keeps the last answer meanwhile
        log.warning("reconcile %s: Kueue workloads not read: %s", service.pk, exc)
        return
    record_workloads(service, workloads)


def _advice(kube: Kube, spec, view: st.ServiceView) -> str:
    nodes = observe_nodes(kube)
    stuck_roles = {p.role for p in view.pods if p.phase == "Pending" and not p.node}
    parts = []
    for pool in spec.pools:
        if pool.role in stuck_roles or len(spec.pools) == 1:
            parts.append(st.gpu_advice(pool.gpus_per_replica, gpu_for(pool.gpu_type).product, nodes))
    return "; ".join(parts)


def _crash_detail(kube: Kube, service, namespace: str, view: st.ServiceView) -> str:
    """'engine exited: <its last error line>' from the crashing container's previous log, plus the capacity
    planner's explanation when it knows why the engine cannot start on that pool."""
    from apps.catalog.engines import EngineSettingsError
    from apps.serving.capacity import crash_explanation

    pod = st.crashing_pod(view)
    if pod is None:
        return ""
    line = st.last_error_line(kube.previous_log(namespace, pod.name, pod.container))
    parts = [f"engine exited: {line}"] if line else []
    pool = next((p for p in service.pools.all() if p.role == pod.role), None)
    try:
        settings = service.engine_settings_obj()
    except EngineSettingsError:
        settings = None
    if pool is not None and settings is not None:
        explanation = crash_explanation(service.model, service.runtime.engine, settings, pool)
        if explanation:
            parts.append(explanation)
    if not parts:
        return ""
    return f"{'; '.join(parts)} (pod {pod.name}: {pod.reason}, {pod.restarts} restarts)"


def _judge(service, view: st.ServiceView, advice: str, crash: str = "") -> tuple[str, list[dict], float | None]:
    previous = service.conditions or []
    conds = [st.condition("Reconciled", True, "Applied", "Desired objects applied.", previous)]
    if view.unschedulable:
        scheduler_says = view.unschedulable[0]
        msg = f"{advice} (scheduler: {scheduler_says})" if advice else scheduler_says
        conds.append(st.condition("Schedulable", False, "Unschedulable", msg, previous))
    else:
        conds.append(st.condition("Schedulable", True, "Scheduled", "", previous))
    if view.crashing:
        conds.append(st.condition("Healthy", False, "CrashLoop", crash or view.crashing[0], previous))
    else:
        conds.append(st.condition("Healthy", True, "Running", "", previous))
    ready = view.all_ready
    summary = ", ".join(f"{p.role} {p.ready}/{p.desired}" for p in view.pools.values())
    conds.append(st.condition("Available", ready, "AllReplicasReady" if ready else "ReplicasNotReady",
                              summary, previous))
    if ready:
        return Phase.READY, conds, None
    stuck = bool(view.unschedulable or view.crashing)
    if stuck:
        return (Phase.DEGRADED if view.ready_replicas else Phase.FAILED), conds, REQUEUE_WHILE_FAILING
    return Phase.DEPLOYING, conds, REQUEUE_WHILE_DEPLOYING


def _write_failure(service, generation: int, reason: str, message: str) -> Outcome:
    conds = [st.condition("Reconciled", False, reason, message, service.conditions)]
    _write_status(service, generation, Phase.FAILED, conds, None, service.endpoint)
    return Outcome(service.pk, ReconcileResult.FAILED, message=f"{reason}: {message}", generation=generation,
                   record=True)


def _events_of(kube: Kube, namespace: str, names: list[str]) -> list[dict]:
    """Events about the named objects (one small field-selected read each, side by side, not the namespace's
    all)."""
    return [event for found in kube.each(lambda name: kube.list(
        "v1", "Event", namespace=namespace, field_selector=f"involvedObject.name={name}"), sorted(set(names)))
        for event in found]


def _write_observation(service, view: st.ServiceView, drift: list[dict], current: dict | None,
                       keep_events: bool = False, autoscalers: list[dict] | None = None,
                       adapters: dict | None = None) -> None:
    """Keep the latest pods, events, pool counts and the last differences found for the service page
    (`current` is the stored observation, read earlier in the pass); skip the write when nothing changed."""
    data = {
        "pools": [{"role": p.role, "desired": p.desired, "ready": p.ready, "updated": p.updated}
                  for p in view.pools.values()],
        "pods": [vars(p) for p in view.pods],
        "events": current["events"] if keep_events and current else [_event_row(e) for e in view.events[-20:]],
        "autoscalers": autoscalers or [],
        "startups": record_startups(view.events, current["startups"] if current else []),
        "adapters": adapters or {},
    }
    previous_drift = current.pop("drift") if current else []
    if current != data or drift:
        data["drift"] = (drift + previous_drift)[:10]
        ServiceObservation.objects.update_or_create(service_id=service.pk,
                                                    defaults={**data, "observed_at": timezone.now()})


def _event_row(event: dict) -> dict:
    involved = event.get("involvedObject") or {}
    return {
        "type": event.get("type", "Normal"), "reason": event.get("reason", ""), "message": event.get("message", ""),
        "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
        "time": event.get("lastTimestamp") or event.get("eventTime") or "", "count": event.get("count", 1),
    }


def _write_status(service, generation: int, phase: str, conditions: list[dict], view, endpoint: str) -> None:
    """Write observed status only when it changed, without touching the spec (no lost updates)."""
    ready = view.ready_replicas if view else 0
    changed = {
        "observed_generation": generation, "phase": phase, "conditions": conditions,
        "ready_replicas": ready, "endpoint": endpoint,
    }
    if any(getattr(service, k) != v for k, v in changed.items()):
        InferenceService.objects.filter(pk=service.pk, deletion_requested_at__isnull=True).update(
            **changed, last_reconciled_at=timezone.now())
    else:
        InferenceService.objects.filter(pk=service.pk).update(last_reconciled_at=timezone.now())
    if view:
        for role, pool in view.pools.items():
            Pool.objects.filter(service_id=service.pk, role=role).exclude(ready_replicas=pool.ready).update(
                ready_replicas=pool.ready)


def record_transient(service_id: int, exc: ClusterError) -> None:
    """Note a retriable failure on the service without changing its phase."""
    service = InferenceService.objects.filter(pk=service_id).first()
    if service is None:
        return
    others = [c for c in service.conditions or [] if c.get("type") != "Reconciled"]
    cond = st.condition("Reconciled", False, "TransientError", exc.message, service.conditions)
    InferenceService.objects.filter(pk=service_id).update(conditions=[cond, *others])
    ReconcileRun.objects.create(service_id=service_id, started_at=timezone.now(), generation=service.generation,
                                result=ReconcileResult.RETRYING, message=exc.message[:2000])
