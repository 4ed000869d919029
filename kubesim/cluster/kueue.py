"""Kueue's vocabulary in kubesim: its labels and gate, its webhook, and the Workloads pods and LeaderWorkerSets make.

Pure functions on API objects; the controller (kubesim/cluster/controllers/kueue.py) reads the informers, calls
them and the shared policy (`capacity.kueue.admit`), and writes back. As Kueue's pod and LeaderWorkerSet
integrations do: a pod labelled `kueue.x-k8s.io/queue-name` is one Workload (`pod-<name>`), pods sharing
`kueue.x-k8s.io/pod-group-name` are one (named after the group, `pod-group-total-count` members), and each group of
a LeaderWorkerSet is one (`leaderworkerset-<name>-<index>`, a leader and `size - 1` workers): admitted whole or not
at all. Their pods carry the scheduling gate `kueue.x-k8s.io/admission` until then.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from capacity.kueue import NEVER, PRIORITY_LABEL, QUEUE_LABEL, Queue
from kubesim.apiserver.admission import AdmissionRequest
from kubesim.apiserver.quantities import parse_quantity, pod_requests
from kubesim.cluster.controllers.base import controller_of, owner_ref
from kubesim.cluster.controllers.leaderworkerset import GROUP_INDEX
from kubesim.cluster.controllers.leaderworkerset import NAME as LWS_NAME
from kubesim.cluster.kueue_crds import GROUP, PRIORITY_SOURCES

POD_GROUP_LABEL = f"{GROUP}/pod-group-name"
POD_GROUP_COUNT = f"{GROUP}/pod-group-total-count"
MANAGED_LABEL = f"{GROUP}/managed"
GATE = f"{GROUP}/admission"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
# Labels of a pod that say which pod it is, not which workload: not copied onto the Workload.
_POD_ONLY = ("pod-template-hash", "controller-revision-hash", "leaderworkerset.sigs.k8s.io/worker-index")
_TEMPLATE_OWNERS = {("apps", "deployments"), ("apps", "statefulsets")}


def kueue_webhook(request: AdmissionRequest) -> None:
    """Kueue's mutating webhooks: gate a queued pod at creation; copy a Deployment's, StatefulSet's or
    LeaderWorkerSet's queue and priority labels onto its pod templates, so its pods are queued too; fill in a
    ClusterQueue's defaults."""
    obj, rt = request.object, request.resource
    if obj is None or request.operation not in ("CREATE", "UPDATE"):
        return
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if (rt.group, rt.plural) == ("", "pods"):
        if request.operation == "CREATE" and labels.get(QUEUE_LABEL):
            spec = obj.setdefault("spec", {})
            gates = spec.setdefault("schedulingGates", [])
            if {"name": GATE} not in gates:
                gates.append({"name": GATE})
            obj["metadata"]["labels"][MANAGED_LABEL] = "true"
        return
    if rt.kind == "ClusterQueue" and rt.group == GROUP:
        _cluster_queue_defaults(obj.setdefault("spec", {}))
        return
    copied = {k: labels[k] for k in (QUEUE_LABEL, PRIORITY_LABEL) if labels.get(k)}
    if not copied:
        return
    spec = obj.get("spec") or {}
    if (rt.group, rt.plural) in _TEMPLATE_OWNERS:
        templates = [spec.get("template")]
    elif rt.kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        templates = [lwt.get("leaderTemplate"), lwt.get("workerTemplate")]
    else:
        return
    for template in templates:
        if isinstance(template, dict):
            template.setdefault("metadata", {}).setdefault("labels", {}).update(copied)


def _cluster_queue_defaults(spec: dict) -> None:
    """The defaults of Kueue's ClusterQueue schema, which a real apiserver fills in from the CRD."""
    spec.setdefault("queueingStrategy", "BestEffortFIFO")
    spec.setdefault("stopPolicy", "None")
    preemption = spec.setdefault("preemption", {})
    preemption.setdefault("withinClusterQueue", NEVER)
    preemption.setdefault("reclaimWithinCohort", NEVER)
    preemption.setdefault("borrowWithinCohort", {}).setdefault("policy", NEVER)


def gpus_of(spec_holder: dict) -> tuple[str | None, int]:
    """(GPU resource, count) a pod or pod template asks for."""
    requests = pod_requests({"spec": spec_holder.get("spec") or {}})
    for name in GPU_RESOURCES:
        if requests.get(name):
            return name, requests[name]
    return None, 0


@dataclass
class Desired:
    """A Workload the pods ask for: where, which pods, its pod sets and what to copy onto it."""

    namespace: str
    name: str
    queue: str
    priority_class: str
    pod_sets: list[dict]
    owners: list[dict]
    labels: dict
    pods: list[dict] = field(default_factory=list)

    def body(self) -> dict:
        """The Workload object to create (its priority is filled in by the controller)."""
        return {"apiVersion": f"{GROUP}/v1beta1", "kind": "Workload",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels,
                             "ownerReferences": self.owners},
                "spec": {"podSets": self.pod_sets, "queueName": self.queue, "active": True}}


def _template_of(pod: dict) -> dict:
    meta = pod.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _POD_ONLY}
    spec = copy.deepcopy(pod.get("spec") or {})
    for transient in ("nodeName", "schedulingGates"):
        spec.pop(transient, None)
    return {"metadata": {"labels": labels}, "spec": spec}


def _labels_of(template: dict) -> dict:
    return {k: v for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
            if k not in _POD_ONLY and k not in (LWS_NAME, GROUP_INDEX)}


def desired_workloads(pods: list[dict], sets: dict[tuple[str, str], dict]) -> dict[tuple[str, str], Desired]:
    """The Workloads queued pods ask for, by (namespace, name); `sets` are the LeaderWorkerSets by key."""
    out: dict[tuple[str, str], Desired] = {}
    for pod in pods:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        queue, ns = labels.get(QUEUE_LABEL), meta.get("namespace") or "default"
        if not queue or meta.get("deletionTimestamp"):
            continue
        klass = labels.get(PRIORITY_LABEL) or (pod.get("spec") or {}).get("priorityClassName") or ""
        ref = controller_of(pod) or {}
        lws = sets.get((ns, ref.get("name", ""))) if ref.get("kind") == "LeaderWorkerSet" else None
        if lws is not None and labels.get(GROUP_INDEX) is not None:
            name = f"leaderworkerset-{ref['name']}-{labels[GROUP_INDEX]}"
            if (ns, name) not in out:
                out[ns, name] = _lws_group(lws, name, queue, klass)
        elif labels.get(POD_GROUP_LABEL):
            name = labels[POD_GROUP_LABEL]
            if (ns, name) not in out:
                count = int((meta.get("annotations") or {}).get(POD_GROUP_COUNT) or 1)
                template = _template_of(pod)
                out[ns, name] = Desired(ns, name, queue, klass,
                                        [{"name": "main", "count": count, "template": template}], [],
                                        _labels_of(template))
            out[ns, name].owners.append(owner_ref(pod, block=False) | {"controller": False})
        else:
            template = _template_of(pod)
            out[ns, f"pod-{meta['name']}"] = Desired(ns, f"pod-{meta['name']}", queue, klass,
                                                     [{"name": "main", "count": 1, "template": template}],
                                                     [owner_ref(pod)], _labels_of(template))
    for pod in pods:
        key = workload_key_of(pod, sets)
        if key in out:
            out[key].pods.append(pod)
    return out


def workload_key_of(pod: dict, sets: dict[tuple[str, str], dict]) -> tuple[str, str] | None:
    """The (namespace, name) of the Workload a queued pod belongs to."""
    meta = pod["metadata"]
    labels, ns = meta.get("labels") or {}, meta.get("namespace") or "default"
    if not labels.get(QUEUE_LABEL):
        return None
    ref = controller_of(pod) or {}
    if ref.get("kind") == "LeaderWorkerSet" and (ns, ref.get("name")) in sets and labels.get(GROUP_INDEX):
        return ns, f"leaderworkerset-{ref['name']}-{labels[GROUP_INDEX]}"
    if labels.get(POD_GROUP_LABEL):
        return ns, labels[POD_GROUP_LABEL]
    return ns, f"pod-{meta['name']}"


def _lws_group(lws: dict, name: str, queue: str, klass: str) -> Desired:
    lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    size = int(lwt.get("size") or 1)
    worker = lwt.get("workerTemplate") or {}
    leader = lwt.get("leaderTemplate") or worker
    sets = [{"name": "leader", "count": 1, "template": copy.deepcopy(leader)}]
    if size > 1:
        sets.append({"name": "workers", "count": size - 1, "template": copy.deepcopy(worker)})
    meta = lws["metadata"]
    return Desired(meta.get("namespace") or "default", name, queue, klass, sets, [owner_ref(lws)],
                   {**_labels_of(worker), LWS_NAME: meta["name"]})


def workload_gpus(workload: dict) -> tuple[str | None, int]:
    """(GPU resource, GPUs of the whole workload) from its pod sets."""
    resource, total = None, 0
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        name, per_pod = gpus_of(pod_set.get("template") or {})
        resource = resource or name
        total += per_pod * int(pod_set.get("count") or 0)
    return resource, total


def _quota(value) -> int | None:
    return None if value is None else int(parse_quantity(value))


def flavor_quotas(cq: dict) -> list[tuple[str, int, int | None, int | None]]:
    """(flavor, nominal, borrowing limit, lending limit) of the GPUs in a ClusterQueue, in its flavor order."""
    out = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for quota in flavor.get("resources") or []:
                if quota.get("name") in GPU_RESOURCES:
                    out.append((flavor["name"], _quota(quota.get("nominalQuota")) or 0,
                                _quota(quota.get("borrowingLimit")), _quota(quota.get("lendingLimit"))))
    return out


def policy_queue(cq: dict) -> Queue:
    """A ClusterQueue as the shared policy sees it; unset preemption policies are Kueue's default, Never."""
    spec = cq.get("spec") or {}
    quotas = flavor_quotas(cq)
    preemption = spec.get("preemption") or {}
    weight = (spec.get("fairSharing") or {}).get("weight")
    return Queue(cq["metadata"]["name"], spec.get("cohort") or "",
                 nominal={f: n for f, n, _b, _l in quotas}, borrowing_limit={f: b for f, _n, b, _l in quotas},
                 lending_limit={f: ln for f, _n, _b, ln in quotas},
                 weight=1.0 if weight is None else parse_quantity(weight),
                 reclaim_within_cohort=preemption.get("reclaimWithinCohort") or NEVER,
                 borrow_within_cohort=(preemption.get("borrowWithinCohort") or {}).get("policy") or NEVER)


def within_queue_policy(cq: dict) -> str:
    return ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue") or NEVER


def fits_flavor(flavor: dict | None, workload: dict) -> bool:
    """Whether a flavor's node labels agree with every pod set's nodeSelector (Kueue skips a flavor that does not)."""
    node_labels = ((flavor or {}).get("spec") or {}).get("nodeLabels") or {}
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        selector = ((pod_set.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        if any(k in selector and selector[k] != v for k, v in node_labels.items()):
            return False
    return True


def priority_source(labelled: bool) -> str:
    """priorityClassSource of a Workload: Kueue's class when the pods name one by label, else the pods' own."""
    return PRIORITY_SOURCES[0] if labelled else PRIORITY_SOURCES[1]

