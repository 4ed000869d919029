"""Kueue's objects for a tenant on a cluster with Kueue installed (kueue.x-k8s.io/v1beta1, Cohort v1alpha1).

A ResourceFlavor per GPU type with its node labels, the tenant's ClusterQueue (nominal quota per flavor, borrowing
and lending limits, fair-sharing weight, preemption policies) in its cohort, a Cohort, a LocalQueue in the
tenant's namespace, a WorkloadPriorityClass and a pod PriorityClass per class of the catalog. The engine pods
carry the queue-name and priority-class labels (apps/serving/names.py), so Kueue's pod and LeaderWorkerSet
integrations queue them: a pod is one workload, a multi-node group one, admitted whole or not at all.
Pure functions over `KueueSpec`, filled from the database by `rendering.spec`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from apps.serving.names import LOCAL_QUEUE_NAME, MANAGED_BY, MANAGED_BY_LABEL, NAMESPACE_NAME_LABEL, tenant_labels
from capacity.gpus import gpu_for
from capacity.kueue import COHORT_VERSION, GROUP, VERSION

API = f"{GROUP}/{VERSION}"
COHORT_API = f"{GROUP}/{COHORT_VERSION}"
# The control plane's own admission and Kueue's ClusterQueue share these policies (capacity.kueue's defaults).
RECLAIM_WITHIN_COHORT = "Any"
BORROW_WITHIN_COHORT = "Never"
POD_PREEMPTION = {"LowerPriority": "PreemptLowerPriority", "Never": "Never"}
# Flavors, cohorts and classes are shared by every tenant on the cluster: they carry no tenant's labels.
SHARED_LABELS = {MANAGED_BY_LABEL: MANAGED_BY}
KUEUE_KINDS = ("PriorityClass", "WorkloadPriorityClass", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")


@dataclass(frozen=True)
class ClassSpec:
    """A priority class of the catalog."""

    name: str
    value: int
    preemption_policy: str = "LowerPriority"
    description: str = ""


@dataclass(frozen=True)
class FlavorQuota:
    """One flavor (GPU type) of a ClusterQueue: nominal GPUs, and limits (None: unlimited / all unused)."""

    gpu_type: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class QueueQuota:
    """One tenant's ClusterQueue: its flavors' quotas, its weight, its cohort and the namespace it serves."""

    name: str  # the tenant's slug
    namespace: str
    cohort: str
    flavors: tuple[FlavorQuota, ...]
    weight: float = 1.0


@dataclass(frozen=True)
class KueueSpec:
    """The Kueue objects one service's reconcile applies: every queue of the cluster's cohorts (a lender has a
    ClusterQueue even before it runs anything there), the service's own queue, the class it runs at, the catalog."""

    queue: str  # the service's tenant's ClusterQueue
    queues: tuple[QueueQuota, ...]
    running: ClassSpec | None  # None only while the catalog has no class at all
    classes: tuple[ClassSpec, ...]

    @property
    def local_queue(self) -> str:
        return LOCAL_QUEUE_NAME

    @property
    def own(self) -> QueueQuota:
        return next(q for q in self.queues if q.name == self.queue)


def _number(value: float) -> int | str:
    return int(value) if float(value).is_integer() else str(value)


def resource_flavor(flavor: FlavorQuota) -> dict:
    gpu = gpu_for(flavor.gpu_type)
    return {"apiVersion": API, "kind": "ResourceFlavor",
            "metadata": {"name": flavor.gpu_type, "labels": dict(SHARED_LABELS)},
            "spec": {"nodeLabels": {gpu.product_label: gpu.product}}}


def _resource_groups(flavors: tuple[FlavorQuota, ...]) -> list[dict]:
    """One group per GPU resource (nvidia.com/gpu, amd.com/gpu): a flavor covers exactly one resource."""
    by_resource: dict[str, list[dict]] = defaultdict(list)
    for flavor in flavors:
        resource = gpu_for(flavor.gpu_type).resource
        quota: dict = {"name": resource, "nominalQuota": flavor.nominal}
        if flavor.borrowing_limit is not None:
            quota["borrowingLimit"] = flavor.borrowing_limit
        if flavor.lending_limit is not None:
            quota["lendingLimit"] = flavor.lending_limit
        by_resource[resource].append({"name": flavor.gpu_type, "resources": [quota]})
    return [{"coveredResources": [resource], "flavors": flavors} for resource, flavors in sorted(by_resource.items())]


def cluster_queue(queue: QueueQuota) -> dict:
    return {"apiVersion": API, "kind": "ClusterQueue",
            "metadata": {"name": queue.name, "labels": tenant_labels(queue.name)},
            "spec": {
                "cohort": queue.cohort,
                # Only the tenant's namespace queues here, through its LocalQueue.
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: queue.namespace}},
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": _resource_groups(queue.flavors),
                "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": RECLAIM_WITHIN_COHORT,
                               "borrowWithinCohort": {"policy": BORROW_WITHIN_COHORT}},
                "fairSharing": {"weight": _number(queue.weight)},
            }}


def priority_objects(klass: ClassSpec) -> list[dict]:
    """The class as Kueue's WorkloadPriorityClass (what it orders and preempts by) and as the pods' PriorityClass."""
    meta = {"name": klass.name, "labels": dict(SHARED_LABELS)}
    return [
        {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": dict(meta), "value": klass.value,
         "description": klass.description},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": dict(meta), "value": klass.value,
         "globalDefault": False, "preemptionPolicy": POD_PREEMPTION[klass.preemption_policy],
         "description": klass.description},
    ]


def kueue_objects(kueue: KueueSpec, tenant: str, namespace: str) -> list[dict]:
    """Every Kueue object the tenant's services need on the cluster (applied beside the tenant's namespace)."""
    flavors = {f.gpu_type: f for q in kueue.queues for f in q.flavors}
    objects = [resource_flavor(flavors[t]) for t in sorted(flavors)]
    objects += [{"apiVersion": COHORT_API, "kind": "Cohort", "metadata": {"name": c, "labels": dict(SHARED_LABELS)},
                 "spec": {}} for c in sorted({q.cohort for q in kueue.queues})]
    objects += [cluster_queue(q) for q in kueue.queues]
    objects.append({"apiVersion": API, "kind": "LocalQueue",
                    "metadata": {"name": kueue.local_queue, "namespace": namespace, "labels": tenant_labels(tenant)},
                    "spec": {"clusterQueue": kueue.queue}})
    for klass in kueue.classes:
        objects += priority_objects(klass)
    return objects
