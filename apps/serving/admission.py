"""Admission: whether a service's replicas hold their tenant queue's GPUs, wait for them, or were preempted.

Where a cluster has Kueue, its Workload objects say (read back by the reconciler, `from_workloads`); elsewhere
the control plane admits replicas itself (`admit_cluster`) with the same policy as kubesim's Kueue controller,
`capacity.kueue.admit`: one workload per replica (a multi-node group whole), the tenants' queues with their
nominal GPUs per type, limits and weights. A replica not admitted is not rendered; a preempted one is taken
away from its service, with an audit entry. Either way the outcome is stored on the service
(`InferenceService.admission`) and shown by the API, the portal and the autoscaler's decisions.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import replace

from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.tenancy.choices import AdmissionState
from apps.tenancy.models import PriorityClass, TenantQueue
from capacity import kueue

NOT_YET = "No admission pass has run since the service was created."
ADMISSION_ACTOR = "admission:controlplane"
LOCK_NAMESPACE = 0x4B55  # the two-int advisory lock of one cluster's admission pass ("KU")


def admission_summary(stored: dict | None) -> dict:
    """{state, reason} of a service's stored admission, for the API and the pages; a service no pass has seen
    yet is waiting."""
    stored = stored or {}
    state = stored.get("state")
    if state not in AdmissionState.values:
        return {"state": AdmissionState.WAITING.value, "reason": NOT_YET}
    return {"state": state, "reason": stored.get("reason", "")}


def admitted_replicas(service) -> dict[str, int] | None:
    """Replicas per pool role the last pass admitted (None: no pass yet, or Kueue admits on this cluster)."""
    replicas = (service.admission or {}).get("replicas")
    return dict(replicas) if isinstance(replicas, dict) else None


def gate(spec, admitted: dict[str, int] | None):
    """The ServiceSpec with each pool's replicas capped at those admitted (unchanged when `admitted` is None)."""
    if admitted is None:
        return spec
    pools = tuple(replace(p, replicas=min(p.replicas, admitted.get(p.role, 0))) for p in spec.pools)
    return replace(spec, pools=pools)


# --- the control plane's own admission (clusters without Kueue) ---------------------------------------------


def _queue_spec(queue, tenant_slug: str, cluster, flavors: set[str]) -> kueue.Queue:
    """A tenant queue as the policy sees it on one cluster: each flavor takes its own entry or the "*" one."""

    def per_flavor(mapping: dict, default):
        return {f: mapping.get(queue.bucket(f), default) for f in flavors}

    return kueue.Queue(name=tenant_slug, cohort=queue.cohort_name(cluster),
                       nominal={f: queue.nominal_of(queue.bucket(f)) for f in flavors},
                       borrowing_limit=per_flavor(queue.borrowing_limit, None),
                       lending_limit=per_flavor(queue.lending_limit, None), weight=float(queue.weight))


def workload_key(service, role: str, index: int) -> str:
    return f"{service.tenant.slug}/{service.name}/{role}-{index}"


def _workloads(service, running) -> list[kueue.Workload]:
    """One workload per wanted replica of each pool; the first `admitted` of a pool hold their quota already."""
    held = admitted_replicas(service) or {}
    created = service.created.timestamp()
    out = []
    for pool in service.pools.all():
        for i in range(pool.replicas):
            out.append(kueue.Workload(
                key=workload_key(service, pool.role, i), queue=service.tenant.slug,
                priority=running.value if running else 0, priority_class=running.name if running else "none",
                flavor=pool.gpu_type, gpus=pool.gpus_per_replica * pool.nodes_per_replica,
                created=created + i / 1000, admitted=i < held.get(pool.role, 0),
                preemption=running.preemption_policy if running else kueue.LOWER_PRIORITY))
    return out


def cluster_queues(cluster) -> dict[int, TenantQueue]:
    """Tenant id -> the queue it has on the cluster: its own there, else its queue for every cluster when it may
    deploy here. Queues of tenants with nothing running here still lend to the cohort."""
    return queues_by_cluster([cluster])[cluster.pk]


def queues_by_cluster(clusters) -> dict[int, dict[int, TenantQueue]]:
    """`cluster_queues` of several clusters at once, in a fixed number of queries (for pages showing many)."""
    from apps.clusters.models import Cluster

    clusters = list(clusters)
    out: dict[int, dict[int, TenantQueue]] = {c.pk: {} for c in clusters}
    for queue in TenantQueue.objects.filter(cluster__in=clusters).select_related("tenant"):
        out[queue.cluster_id][queue.tenant_id] = queue
    allowed: dict[int, set[int]] = defaultdict(set)
    closed = [c.pk for c in clusters if not c.open_to_all_tenants]
    for cluster_id, tenant_id in Cluster.tenants.through.objects.filter(cluster_id__in=closed).values_list(
            "cluster_id", "tenant_id"):
        allowed[cluster_id].add(tenant_id)
    for queue in TenantQueue.objects.filter(cluster__isnull=True).select_related("tenant"):
        for cluster in clusters:
            if queue.tenant_id not in out[cluster.pk] and (
                    cluster.open_to_all_tenants or queue.tenant_id in allowed[cluster.pk]):
                out[cluster.pk][queue.tenant_id] = queue
    return out


def cluster_plan(cluster) -> tuple[kueue.Plan, list]:
    """The policy's plan for every live service on a cluster without Kueue, and those services."""
    return cluster_plans([cluster])[cluster.pk]


def cluster_plans(clusters) -> dict[int, tuple[kueue.Plan, list]]:
    """`cluster_plan` of several clusters at once, in a fixed number of queries."""
    from apps.serving.models import InferenceService

    clusters = list(clusters)
    services = list(InferenceService.objects.filter(cluster__in=clusters, deletion_requested_at__isnull=True)
                    .select_related("tenant__default_priority_class", "priority_class")
                    .prefetch_related("pools"))
    platform = PriorityClass.objects.platform_default()
    queues_of = queues_by_cluster(clusters)
    out = {}
    for cluster in clusters:
        mine = [s for s in services if s.cluster_id == cluster.pk]
        flavors = {p.gpu_type for s in mine for p in s.pools.all()}
        tenant_queues = queues_of[cluster.pk]
        queues = [_queue_spec(q, q.tenant.slug, cluster, flavors) for q in tenant_queues.values()]
        workloads = []
        for service in mine:
            if service.tenant_id in tenant_queues:  # validation refuses others; one left from before waits
                running = service.priority_class or service.tenant.default_priority_class or platform
                workloads += _workloads(service, running)
        out[cluster.pk] = (kueue.admit(queues, workloads), mine)
    return out


def admit_cluster(cluster) -> tuple[list[int], kueue.Plan]:
    """Run one admission pass over the cluster and store each service's outcome; return the ids of the services
    whose admitted replicas changed (each needs a reconcile), and the plan. One pass at a time per cluster."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE, cluster.pk])
        plan, services = cluster_plan(cluster)
        changed = []
        for service in services:
            before = service.admission or {}
            after = _outcome(service, plan, before)
            if after != before:
                type(service).objects.filter(pk=service.pk).update(admission=after)
                _audit_preemptions(service, plan, before, after)
                if after.get("replicas") != before.get("replicas"):
                    changed.append(service.pk)
    return changed, plan


def after_scale_up(service, role: str, desired: int) -> str:
    """Admit at once after the autoscaler scaled a pool up (clusters without Kueue; Kueue admits there itself):
    words for its decision when replicas wait for quota or took someone's GPUs, "" when all were admitted."""
    from apps.serving.dispatch import enqueue_reconcile

    if service.cluster.kueue_installed:
        return ""
    changed, plan = admit_cluster(service.cluster)
    for other in changed:
        enqueue_reconcile(other)
    mine = [workload_key(service, role, i) for i in range(desired)]
    words = [f"preempted {key} ({plan.preempted[key].reason})" for key in sorted(plan.preempted)
             if plan.preempted[key].by in mine]
    waiting = [plan.waiting[key].reason for key in mine if key in plan.waiting]
    if waiting:
        words.append(f"{len(waiting)} of the new replicas wait for quota: {waiting[0]}")
    return "; ".join(words)


def _outcome(service, plan: kueue.Plan, before: dict) -> dict:
    """A service's stored admission after a pass: replicas admitted per role, and its state in words."""
    keys = {workload_key(service, p.role, i): p.role for p in service.pools.all() for i in range(p.replicas)}
    replicas = Counter(role for key, role in keys.items() if key in plan.admitted)
    replicas = {p.role: replicas.get(p.role, 0) for p in service.pools.all()}
    preempted = [(key, plan.preempted[key]) for key in keys if key in plan.preempted]
    waiting = sorted((plan.waiting[key].position, plan.waiting[key].reason) for key in keys if key in plan.waiting)
    if preempted:
        by = preempted[0][1].by
        reason = f"{preempted[0][1].reason[0].upper()}{preempted[0][1].reason[1:]} at {timezone.localtime():%H:%M}"
        return {"state": AdmissionState.PREEMPTED, "reason": reason, "by": by, "replicas": replicas,
                "at": timezone.now().isoformat()}
    if waiting:
        if before.get("state") == AdmissionState.PREEMPTED:
            return {**before, "replicas": replicas}  # still short of what was taken: the page keeps saying why
        return {"state": AdmissionState.WAITING, "reason": f"Waiting for quota: {waiting[0][1]}",
                "replicas": replicas}
    return {"state": AdmissionState.ADMITTED, "reason": _admitted_words(service, plan, keys), "replicas": replicas}


def _admitted_words(service, plan: kueue.Plan, keys: dict) -> str:
    """ "Admitted", or "Admitted on borrowed quota (2 L4 from globex)" when some replicas borrow."""
    flavors = {p.role: p.gpu_type for p in service.pools.all()}
    borrowed: dict[tuple[str, str], int] = defaultdict(int)
    for key, role in keys.items():
        for lender, gpus in plan.admitted[key].borrowed.items():
            borrowed[lender, flavors[role]] += gpus
    if not borrowed:
        return "Admitted"
    parts = ", ".join(f"{n} {kueue.gpu_word(f)} from {lender}" for (lender, f), n in sorted(borrowed.items()))
    return f"Admitted on borrowed quota ({parts})"


def _audit_preemptions(service, plan: kueue.Plan, before: dict, after: dict) -> None:
    """An audit entry for every replica this pass preempted: who took it, and why."""
    for pool in service.pools.all():
        for i in range(pool.replicas):
            found = plan.preempted.get(workload_key(service, pool.role, i))
            if found is None:
                continue
            record_change(actor=None, actor_label=ADMISSION_ACTOR, obj=service, action=AuditAction.UPDATE,
                          via=AuditVia.SYSTEM, before={"admission": before},
                          after={"admission": after, "preempted": workload_key(service, pool.role, i),
                                 "by": found.by, "reason": found.reason, "kind": found.kind})



# --- reading admission back from Kueue (clusters with Kueue) ---------------------------------------------------

# "borrowing 1 H100 80GB from globex, 2 L4 from initech" in Kueue's QuotaReserved message (kubesim writes it so).
BORROWED = re.compile(r"(?:borrowing |, )(\d+) (.+?) from ([a-z0-9-]+)")


def _conditions(workload: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}


def _true(conditions: dict, kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def from_workloads(workloads: list[dict]) -> dict | None:
    """A service's admission as Kueue's Workloads of its pods say it (their conditions QuotaReserved, Admitted,
    Evicted, Preempted and their messages); None when Kueue has made none yet."""
    if not workloads:
        return None
    states = [(_conditions(w), w) for w in sorted(workloads, key=lambda w: w["metadata"]["name"])]
    for conditions, _ in states:
        if not _true(conditions, "Admitted") and (_true(conditions, "Preempted") or _true(conditions, "Evicted")):
            found = conditions.get("Preempted") or conditions.get("Evicted")
            message = found.get("message") or "Preempted"
            return {"state": AdmissionState.PREEMPTED,
                    "reason": f"{message[0].upper()}{message[1:]}{_at(found.get('lastTransitionTime'))}"}
    for conditions, _ in states:
        if not _true(conditions, "Admitted"):
            message = (conditions.get("QuotaReserved") or {}).get("message") or "not yet considered by Kueue"
            return {"state": AdmissionState.WAITING, "reason": f"Waiting for quota: {message}"}
    borrowed: Counter = Counter()
    for conditions, _ in states:
        for n, word, lender in BORROWED.findall((conditions.get("QuotaReserved") or {}).get("message") or ""):
            borrowed[word, lender] += int(n)
    if not borrowed:
        return {"state": AdmissionState.ADMITTED, "reason": "Admitted"}
    parts = ", ".join(f"{n} {word} from {lender}" for (word, lender), n in sorted(borrowed.items()))
    return {"state": AdmissionState.ADMITTED, "reason": f"Admitted on borrowed quota ({parts})"}


def _at(stamp: str | None) -> str:
    """ " at 12:03" in the control plane's time zone, from a Kubernetes timestamp."""
    moment = parse_datetime(stamp or "")
    return f" at {timezone.localtime(moment):%H:%M}" if moment else ""


def record_workloads(service, workloads: list[dict]) -> None:
    """Store what Kueue's Workloads say of the service, and audit a preemption the first time it is seen."""
    after = from_workloads(workloads)
    before = service.admission or {}
    if after is None or after == before:
        return
    type(service).objects.filter(pk=service.pk).update(admission=after)
    if after["state"] == AdmissionState.PREEMPTED:  # a new preemption: the same one read again returned above
        record_change(actor=None, actor_label=ADMISSION_ACTOR, obj=service, action=AuditAction.UPDATE,
                      via=AuditVia.SYSTEM, before={"admission": before}, after={"admission": after})
