"""Kueue's controller in kubesim: Workloads for queued pods, admitted by quota through the shared policy.

One pass (a single work-queue key: admission is decided across a cohort) as `kueue-controller-manager`:
create and remove Workloads for the pods and LeaderWorkerSet groups that ask for a queue
(kubesim/cluster/kueue.py), turn ClusterQueues and Workloads into the policy's terms, call
`capacity.kueue.admit` (the same function the control plane uses where Kueue is absent), then act on the plan:
reserve quota and lift the pods' scheduling gates (adding the flavor's node labels to their nodeSelector), evict
preempted workloads (their pods deleted; a LeaderWorkerSet recreates its group, gated again), say why others
wait, and keep ClusterQueue and LocalQueue status, conditions and events as Kueue writes them.
"""

from __future__ import annotations

from capacity.kueue import NEVER, Admitted, Preempted, Waiting, admit, gpu_word
from capacity.kueue import Workload as PolicyWorkload
from kubesim.cluster.controllers.base import Controller, Informer, controller_of, key_of
from kubesim.cluster.controllers.common import PODS, delete_pod, write_status
from kubesim.cluster.events import now_micro, parse_time
from kubesim.cluster.kueue import (
    GATE,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    Desired,
    desired_workloads,
    fits_flavor,
    flavor_quotas,
    policy_queue,
    priority_source,
    within_queue_policy,
    workload_gpus,
)
from kubesim.cluster.kueue_crds import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOADS,
)

COMPONENT = "kueue-controller-manager"
POD_PRIORITY_CLASSES = "scheduling.k8s.io/v1/priorityclasses"
LWS = "leaderworkerset.x-k8s.io/v1/leaderworkersets"
KEY = "admission"
# What of a pod changes a Workload or its admission (container states and probes do not).
_POD_FIELDS = (("spec", "schedulingGates"), ("spec", "nodeName"), ("metadata", "deletionTimestamp"),
               ("metadata", "labels"))
PREEMPTED_FINISHED = "the preempted pods were deleted; their replacements queue as new workloads"


def _conditions(wl: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (wl.get("status") or {}).get("conditions") or []}


def _condition(conditions: list[dict], kind: str, status: str, reason: str, message: str) -> list[dict]:
    """Set a metav1.Condition, keeping lastTransitionTime while the status holds. The time has microseconds:
    Kueue orders admissions and evictions by times it keeps in memory, finer than a second."""
    old = next((c for c in conditions if c.get("type") == kind), None)
    stamp = old["lastTransitionTime"] if old and old.get("status") == status else now_micro()
    out = [c for c in conditions if c.get("type") != kind]
    out.append({"type": kind, "status": status, "lastTransitionTime": stamp, "reason": reason, "message": message})
    return out


def _seconds(stamp) -> float:
    when = parse_time(stamp)
    return when.timestamp() if when else 0.0


def _finished(wl: dict) -> bool:
    return (_conditions(wl).get("Finished") or {}).get("status") == "True"


def _admitted(wl: dict) -> bool:
    return bool((wl.get("status") or {}).get("admission")) and \
        (_conditions(wl).get("QuotaReserved") or {}).get("status") == "True"


class KueueController(Controller):
    """Admits Workloads by quota, gates and evicts their pods, and writes Kueue's status and events."""

    name = COMPONENT

    def __init__(self, api, recorder, informers: dict[str, Informer]):
        super().__init__()
        self.api, self.recorder = api, recorder
        self.pods, self.sets = informers[PODS], informers[LWS]
        self.workloads, self.cqs, self.lqs = informers[WORKLOADS], informers[CLUSTER_QUEUES], informers[LOCAL_QUEUES]
        self.flavors, self.wpcs, self.pcs = (informers[RESOURCE_FLAVORS], informers[PRIORITY_CLASSES],
                                             informers[POD_PRIORITY_CLASSES])
        for informer in (self.workloads, self.cqs, self.lqs, self.flavors, self.wpcs, self.pcs):
            informer.handlers.append(lambda _t, _o, _old: self.enqueue(KEY))
        self.sets.handlers.append(self._set_changed)
        self.pods.handlers.append(self._pod_changed)

    def _set_changed(self, _type: str, lws: dict, _old: dict | None) -> None:
        """Only a queued set matters (its groups' Workloads follow its replicas): the webhook labels its templates."""
        lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
        if any(QUEUE_LABEL in (((t or {}).get("metadata") or {}).get("labels") or {})
               for t in (lwt.get("workerTemplate"), lws)):
            self.enqueue(KEY)

    def _pod_changed(self, event_type: str, pod: dict, old: dict | None) -> None:
        labelled = [p for p in (pod, old) if p and QUEUE_LABEL in ((p.get("metadata") or {}).get("labels") or {})]
        if not labelled:
            return
        if event_type == "MODIFIED" and old is not None and all(
                (pod.get(a) or {}).get(b) == (old.get(a) or {}).get(b) for a, b in _POD_FIELDS):
            return
        self.enqueue(KEY)

    # --- the pass --------------------------------------------------------------------------------------------

    async def reconcile(self, _key) -> None:
        sets = {key_of(s): s for s in self.sets.list()}
        desired = await self._sync_workloads(sets)
        active = [w for w in self.workloads.list() if not _finished(w) and not w["metadata"].get("deletionTimestamp")]
        inputs, blocked, cqs = self._policy_inputs(active)
        plan = admit([policy_queue(cq) for cq in cqs.values()], inputs.values())
        for wl in active:
            key = "/".join(key_of(wl))
            pods = desired[key_of(wl)].pods if key_of(wl) in desired else []
            if key in plan.admitted:
                await self._admit(wl, inputs[key], plan.admitted[key], pods)
            elif key in plan.preempted:
                await self._evict(wl, plan.preempted[key], pods)
            else:
                waiting = plan.waiting.get(key) or Waiting(0, blocked.get(key, ""))
                await self._wait(wl, waiting, "Inadmissible" if key in blocked else "Pending", pods)
        await self._queue_status(cqs, active)

    async def _sync_workloads(self, sets: dict) -> dict[tuple[str, str], Desired]:
        """Create the Workloads queued pods ask for; remove those nothing asks for any more. Returns what the
        pods ask for, with their pods."""
        queued = [p for p in self.pods.list() if QUEUE_LABEL in (p["metadata"].get("labels") or {})]
        desired = desired_workloads(queued, sets)
        for (ns, name), d in desired.items():
            if self.workloads.get(ns, name) is not None:
                continue
            body = d.body()
            body["spec"].update(self._priority(d.priority_class, bool(d.pods and (
                d.pods[0]["metadata"].get("labels") or {}).get(PRIORITY_LABEL))))
            created = await self.api.create(WORKLOADS, body)
            self.workloads.apply("ADDED", created)
            owner = sets.get((ns, d.owners[0]["name"])) if d.owners[0].get("kind") == "LeaderWorkerSet" else d.pods[0]
            await self.recorder.record(owner, "CreatedWorkload", f"Created Workload: {ns}/{name}",
                                       component=COMPONENT)
        live_owners = {controller_of(p)["uid"] for p in queued if controller_of(p)} | {
            s["metadata"]["uid"] for s in sets.values()}
        for wl in self.workloads.list():
            if key_of(wl) not in desired and not self._still_wanted(wl, sets, live_owners):
                gone = await self.api.delete(WORKLOADS, *key_of(wl))
                self.workloads.apply("DELETED", gone)
        return desired

    def _still_wanted(self, wl: dict, sets: dict, live_owners: set[str]) -> bool:
        """A LeaderWorkerSet group's Workload outlives its pods while the group exists (they are recreated); a
        preempted pod's record stays until its owner has an admitted replacement."""
        ns, name = key_of(wl)
        owner = controller_of(wl) or {}
        if owner.get("kind") == "LeaderWorkerSet":
            lws = sets.get((ns, owner.get("name")))
            replicas = int(((lws or {}).get("spec") or {}).get("replicas", 1)) if lws else 0
            return any(name == f"leaderworkerset-{owner['name']}-{g}" for g in range(replicas))
        if not _finished(wl) or owner.get("uid") not in live_owners:
            return False
        since = _seconds(_conditions(wl)["Finished"].get("lastTransitionTime"))
        for other in self.workloads.list(ns):
            pod = next((self.pods.get(ns, r["name"]) for r in other["metadata"].get("ownerReferences") or []
                        if r.get("kind") == "Pod"), None)
            if pod and (controller_of(pod) or {}).get("uid") == owner.get("uid") and _admitted(other) and \
                    _seconds(_conditions(other)["QuotaReserved"].get("lastTransitionTime")) > since:
                return False
        return True

    def _priority(self, klass: str, labelled: bool) -> dict:
        """spec.priority and its source: the WorkloadPriorityClass named by label, else the pods' PriorityClass."""
        source = self.wpcs.get("", klass) if labelled else self.pcs.get("", klass) if klass else next(
            (pc for pc in self.pcs.list() if pc.get("globalDefault")), None)
        out = {"priority": int((source or {}).get("value") or 0)}
        if source is not None:
            out.update(priorityClassName=source["metadata"]["name"], priorityClassSource=priority_source(labelled))
        return out

    def _policy_inputs(self, active: list[dict]) -> tuple[dict[str, PolicyWorkload], dict[str, str], dict]:
        """The policy's workloads by key, why the others cannot even queue, and the active ClusterQueues."""
        cqs, inputs, blocked = {}, {}, {}
        for cq in self.cqs.list():
            missing = [f for f, *_ in flavor_quotas(cq) if self.flavors.get("", f) is None]
            if not missing:
                cqs[cq["metadata"]["name"]] = cq
        for wl in active:
            key, (ns, _name) = "/".join(key_of(wl)), key_of(wl)
            spec = wl.get("spec") or {}
            lq = self.lqs.get(ns, spec.get("queueName") or "")
            cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue", "")
            cq = cqs.get(cq_name)
            resource, gpus = workload_gpus(wl)
            if lq is None:
                blocked[key] = f"LocalQueue {spec.get('queueName')} doesn't exist"
            elif cq is None:
                known = self.cqs.get("", cq_name) is not None
                blocked[key] = f"ClusterQueue {cq_name} is inactive" if known else \
                    f"ClusterQueue {cq_name} doesn't exist"
            if key in blocked and not _admitted(wl):
                continue
            flavor = self._flavor_of(wl, cq, resource)
            if flavor is None:
                blocked[key] = f"couldn't assign flavors: no flavor of ClusterQueue {cq_name} covers {resource} " \
                               f"on the pods' nodes"
                continue
            preempted = _conditions(wl).get("Evicted") or {}
            created = preempted.get("lastTransitionTime") or wl["metadata"].get("creationTimestamp")
            reserved = (_conditions(wl).get("QuotaReserved") or {}).get("lastTransitionTime")
            policy = within_queue_policy(cq) if cq else NEVER
            if self._never_preempts(spec):
                policy = NEVER
            inputs[key] = PolicyWorkload(key, cq_name, int(spec.get("priority") or 0),
                                         spec.get("priorityClassName") or "", flavor, gpus if resource else 0,
                                         _seconds(created), _admitted(wl), policy,
                                         _seconds(reserved) if _admitted(wl) else None)
        return inputs, blocked, cqs

    def _never_preempts(self, spec: dict) -> bool:
        source = spec.get("priorityClassSource") == "scheduling.k8s.io/priorityclass"
        pc = self.pcs.get("", spec.get("priorityClassName") or "") if source else None
        return (pc or {}).get("preemptionPolicy") == "Never"

    def _flavor_of(self, wl: dict, cq: dict | None, resource: str | None) -> str | None:
        """The flavor a Workload holds, or the first of its queue whose node labels suit its pods."""
        assignments = ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
        if _admitted(wl) and assignments:
            return next(iter((assignments[0].get("flavors") or {}).values()), "")
        if resource is None or cq is None:
            return ""
        return next((f for f, *_ in flavor_quotas(cq) if fits_flavor(self.flavors.get("", f), wl)), None)

    # --- acting on the plan ---------------------------------------------------------------------------------

    async def _admit(self, wl: dict, item: PolicyWorkload, admitted: Admitted, pods: list[dict]) -> None:
        if not _admitted(wl):
            lenders = ", ".join(f"{n} {gpu_word(item.flavor)} from {q}" for q, n in sorted(admitted.borrowed.items()))
            cq = item.queue
            status = dict(wl.get("status") or {})
            status["admission"] = {"clusterQueue": cq, "podSetAssignments": self._assignments(wl, item.flavor)}
            conditions = [c for c in status.get("conditions") or [] if c.get("type") not in ("Evicted", "Preempted")]
            reserved = f"Quota reserved in ClusterQueue {cq}" + (f", borrowing {lenders}" if lenders else "")
            conditions = _condition(conditions, "QuotaReserved", "True", "QuotaReserved", reserved)
            conditions = _condition(conditions, "Admitted", "True", "Admitted", "The workload is admitted")
            status["conditions"] = conditions
            await write_status(self.api, WORKLOADS, self.workloads, wl, status)
            await self.recorder.record(wl, "QuotaReserved", reserved, component=COMPONENT)
            await self.recorder.record(wl, "Admitted", f"Admitted by ClusterQueue {cq}", component=COMPONENT)
        flavor = self.flavors.get("", item.flavor) if item.flavor else None
        node_labels = ((flavor or {}).get("spec") or {}).get("nodeLabels") or {}
        for pod in pods:
            if GATE in [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]:
                await self._ungate(pod, node_labels)

    def _assignments(self, wl: dict, flavor: str) -> list[dict]:
        out = []
        for pod_set in (wl.get("spec") or {}).get("podSets") or []:
            resource, gpus = workload_gpus({"spec": {"podSets": [pod_set]}})
            entry = {"name": pod_set["name"], "count": int(pod_set.get("count") or 0), "flavors": {},
                     "resourceUsage": {}}
            if resource:
                entry["flavors"][resource] = flavor
                entry["resourceUsage"][resource] = str(gpus)
            out.append(entry)
        return out

    async def _ungate(self, pod: dict, node_labels: dict) -> None:
        def change(current: dict) -> None:
            spec = current.setdefault("spec", {})
            gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
            if gates:
                spec["schedulingGates"] = gates
            else:
                spec.pop("schedulingGates", None)
            if node_labels:
                spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **node_labels}

        updated = await self.api.mutate(PODS, *key_of(pod), change)
        if updated is not None:
            self.pods.apply("MODIFIED", updated)

    async def _evict(self, wl: dict, preempted: Preempted, pods: list[dict]) -> None:
        status = {k: v for k, v in (wl.get("status") or {}).items() if k != "admission"}
        conditions = status.get("conditions") or []
        conditions = _condition(conditions, "Evicted", "True", "Preempted", preempted.reason)
        conditions = _condition(conditions, "Preempted", "True", preempted.kind, preempted.reason)
        conditions = _condition(conditions, "QuotaReserved", "False", "Preempted", preempted.reason)
        conditions = _condition(conditions, "Admitted", "False", "NoReservation", "The workload has no reservation")
        pod_owned = all(r.get("kind") == "Pod" for r in wl["metadata"].get("ownerReferences") or [])
        if pod_owned and pods:
            # The pods go and their replacements queue as new Workloads: this one stays as the record of the
            # preemption, owned by the pods' controller, until a replacement is admitted.
            owner = controller_of(pods[0])
            if owner is not None:
                updated = await self.api.mutate(WORKLOADS, *key_of(wl), lambda w: w["metadata"].update(
                    ownerReferences=[{**owner, "blockOwnerDeletion": False}]))
                if updated is not None:
                    self.workloads.apply("MODIFIED", updated)
                    wl = updated
            conditions = _condition(conditions, "Finished", "True", "Preempted", PREEMPTED_FINISHED)
        status["conditions"] = conditions
        status["requeueState"] = {"count": int((status.get("requeueState") or {}).get("count") or 0) + 1}
        await write_status(self.api, WORKLOADS, self.workloads, wl, status)
        await self.recorder.record(wl, "Preempted", preempted.reason, component=COMPONENT)
        for pod in pods:
            await self.recorder.record(pod, "Preempted", preempted.reason, component=COMPONENT)
            await delete_pod(self.api, self.pods, pod)

    async def _wait(self, wl: dict, waiting: Waiting, reason: str, pods: list[dict]) -> None:
        status = dict(wl.get("status") or {})
        before = (_conditions(wl).get("QuotaReserved") or {}).get("message")
        status["conditions"] = _condition(status.get("conditions") or [], "QuotaReserved", "False", reason,
                                          waiting.reason)
        await write_status(self.api, WORKLOADS, self.workloads, wl, status)
        if before != waiting.reason:
            await self.recorder.record(wl, reason, waiting.reason, "Warning" if reason == "Inadmissible" else "Normal",
                                       component=COMPONENT)
        for pod in pods:  # a pod running without quota (its gate lifted by hand): Kueue stops it
            spec = pod.get("spec") or {}
            if spec.get("nodeName") and not spec.get("schedulingGates"):
                await self.recorder.record(pod, "Stopped", f"Not admitted by a ClusterQueue: {waiting.reason}",
                                           component=COMPONENT)
                await delete_pod(self.api, self.pods, pod)

    # --- queues' status --------------------------------------------------------------------------------------

    async def _queue_status(self, active_cqs: dict, active: list[dict]) -> None:
        lq_of = {key_of(wl): (key_of(wl)[0], (wl.get("spec") or {}).get("queueName") or "") for wl in active}
        cq_of = {k: ((self.lqs.get(*lq) or {}).get("spec") or {}).get("clusterQueue") for k, lq in lq_of.items()}
        for cq in self.cqs.list():
            name = cq["metadata"]["name"]
            mine = [w for w in active if cq_of.get(key_of(w)) == name]
            missing = [f for f, *_ in flavor_quotas(cq) if self.flavors.get("", f) is None]
            status = {**self._counts(mine), "flavorsReservation": self._usage(cq, mine, True)}
            status["flavorsUsage"] = status["flavorsReservation"]
            conditions = (cq.get("status") or {}).get("conditions") or []
            if missing:
                status["conditions"] = _condition(conditions, "Active", "False", "FlavorNotFound",
                                                  f"Can't admit new workloads: references missing ResourceFlavor(s): "
                                                  f"{', '.join(missing)}")
            else:
                status["conditions"] = _condition(conditions, "Active", "True", "Ready", "Can admit new workloads")
            await write_status(self.api, CLUSTER_QUEUES, self.cqs, cq, status)
        for lq in self.lqs.list():
            cq = self.cqs.get("", (lq.get("spec") or {}).get("clusterQueue") or "")
            mine = [w for w in active if lq_of.get(key_of(w)) == key_of(lq)]
            status = {**self._counts(mine), "flavorUsage": self._usage(cq, mine, False) if cq else []}
            status["flavorsReservation"] = status["flavorUsage"]
            conditions = (lq.get("status") or {}).get("conditions") or []
            status["conditions"] = _condition(conditions, "Active", "True", "Ready",
                                              "Can submit new workloads to localQueue") if cq else _condition(
                conditions, "Active", "False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
            await write_status(self.api, LOCAL_QUEUES, self.lqs, lq, status)

    @staticmethod
    def _counts(workloads: list[dict]) -> dict:
        admitted = sum(1 for w in workloads if _admitted(w))
        return {"pendingWorkloads": len(workloads) - admitted, "reservingWorkloads": admitted,
                "admittedWorkloads": admitted}

    @staticmethod
    def _usage(cq: dict, workloads: list[dict], borrowed: bool) -> list[dict]:
        """GPUs the queue's admitted workloads hold per flavor (and what of it lies beyond the nominal quota)."""
        out = []
        for flavor, nominal, *_ in flavor_quotas(cq):
            used, resource = 0, "nvidia.com/gpu"
            for wl in workloads:
                for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
                    for res, fl in (a.get("flavors") or {}).items():
                        if fl == flavor and _admitted(wl):
                            used += int((a.get("resourceUsage") or {}).get(res) or 0)
                            resource = res
            entry = {"name": resource, "total": str(used)}
            if borrowed:
                entry["borrowed"] = str(max(0, used - nominal))
            out.append({"name": flavor, "resources": [entry]})
        return out
