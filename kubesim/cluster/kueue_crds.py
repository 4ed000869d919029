"""Kueue's API as kubesim installs it (`kueue.x-k8s.io`): the CRD objects with their schemas and printer columns.

Written from Kueue's documented API (v1beta1; Cohort v1alpha1), not copied from its repository: the fields
kubesim's Kueue controller reads and writes, with types and enums, so that `kubectl explain`, server-side apply,
unknown-field checks and the control plane's validation of rendered objects work as against a real install. A
cluster started with Kueue on (the default; `serve --no-kueue` leaves it out) serves these at start, as a
`kubectl apply` of Kueue's manifests would: discovery listing `kueue.x-k8s.io` is the record that it is installed.
"""

from __future__ import annotations

from capacity.kueue import COHORT_VERSION, GROUP, VERSION
from kubesim.apiserver.resources import crd

RESOURCE_FLAVORS = f"{GROUP}/{VERSION}/resourceflavors"
CLUSTER_QUEUES = f"{GROUP}/{VERSION}/clusterqueues"
LOCAL_QUEUES = f"{GROUP}/{VERSION}/localqueues"
WORKLOADS = f"{GROUP}/{VERSION}/workloads"
PRIORITY_CLASSES = f"{GROUP}/{VERSION}/workloadpriorityclasses"
COHORTS = f"{GROUP}/{COHORT_VERSION}/cohorts"

PREEMPTION_POLICIES = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
RECLAIM_POLICIES = ["Never", "LowerPriority", "Any"]
BORROW_POLICIES = ["Never", "LowerPriority"]
PRIORITY_SOURCES = [f"{GROUP}/workloadpriorityclass", "scheduling.k8s.io/priorityclass", ""]


def _s(description: str = "", **extra) -> dict:
    return {"type": "string", **({"description": description} if description else {}), **extra}


def _i(description: str = "", **extra) -> dict:
    return {"type": "integer", "format": "int32", **({"description": description} if description else {}), **extra}


def _obj(properties: dict, required: list[str] | None = None, description: str = "") -> dict:
    out: dict = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if description:
        out["description"] = description
    return out


def _list(items: dict, keys: list[str] | None = None, **extra) -> dict:
    out: dict = {"type": "array", "items": items, **extra}
    if keys:
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = keys
    return out


def _map(values: dict | None = None) -> dict:
    return {"type": "object", "additionalProperties": values or {"type": "string"}}


QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True,
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
                       r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"}
FREE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
CONDITION = _obj({
    "type": _s("Type of condition in CamelCase."),
    "status": _s("True, False or Unknown.", enum=["True", "False", "Unknown"]),
    "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
    "lastTransitionTime": _s("When the condition last changed status.", format="date-time"),
    "reason": _s("Why, in CamelCase."), "message": _s("Why, for people."),
}, ["type", "status", "lastTransitionTime", "reason", "message"])
CONDITIONS = _list(CONDITION, ["type"])
LABEL_SELECTOR = {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
    "matchLabels": _map(),
    "matchExpressions": _list(_obj({"key": _s(), "operator": _s(), "values": _list(_s())}, ["key", "operator"])),
}}
TAINT = _obj({"key": _s(), "value": _s(), "effect": _s(enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]),
              "timeAdded": _s(format="date-time")}, ["key", "effect"])
TOLERATION = _obj({"key": _s(), "operator": _s(), "value": _s(), "effect": _s(),
                   "tolerationSeconds": {"type": "integer", "format": "int64"}})
RESOURCE_QUOTA = _obj({
    "name": _s("The resource, e.g. nvidia.com/gpu."),
    "nominalQuota": {**QUANTITY, "description": "Quantity of this resource available to the queue's workloads."},
    "borrowingLimit": {**QUANTITY, "description": "How much more the queue may borrow from its cohort; "
                                                  "unset: no limit."},
    "lendingLimit": {**QUANTITY, "description": "How much of the unused nominal quota the cohort may borrow; "
                                                "unset: all of it."},
}, ["name", "nominalQuota"])
RESOURCE_GROUPS = _list(_obj({
    "coveredResources": _list(_s(), maxItems=16, minItems=1),
    "flavors": _list(_obj({"name": _s("A ResourceFlavor."), "resources": _list(RESOURCE_QUOTA, ["name"], minItems=1)},
                          ["name", "resources"]), ["name"], minItems=1, maxItems=16),
}, ["coveredResources", "flavors"]), maxItems=16)
FAIR_SHARING = _obj({"weight": {**QUANTITY, "description": "Weight of this queue's share of the cohort's "
                                                           "unused resources (default 1)."}})
FLAVOR_USAGE = _list(_obj({"name": _s(), "resources": _list(_obj({
    "name": _s(), "total": QUANTITY, "borrowed": QUANTITY}, ["name"]), ["name"])}, ["name", "resources"]), ["name"])


def _status_counts() -> dict:
    return {"pendingWorkloads": _i(), "reservingWorkloads": _i(), "admittedWorkloads": _i(), "conditions": CONDITIONS}


def _columns(*cols: tuple) -> list[dict]:
    out = []
    for name, path, kind, *priority in cols:
        out.append({"name": name, "jsonPath": path, "type": kind, **({"priority": priority[0]} if priority else {})})
    out.append({"name": "Age", "jsonPath": ".metadata.creationTimestamp", "type": "date"})
    return out


def _root(spec: dict | None = None, status: dict | None = None, **top) -> dict:
    props = dict(top)
    if spec is not None:
        props["spec"] = spec
    if status is not None:
        props["status"] = status
    return {"type": "object", "properties": props}


def resource_flavor() -> dict:
    spec = _obj({"nodeLabels": {**_map(), "description": "Labels of the nodes with this flavor; added to the "
                                                         "nodeSelector of admitted pods."},
                 "nodeTaints": _list(TAINT), "tolerations": _list(TOLERATION), "topologyName": _s()})
    return crd(GROUP, VERSION, "resourceflavors", "ResourceFlavor", short=["flavor", "flavors", "rf"],
               namespaced=False, status=False, schema=_root(spec), columns=_columns())


def cluster_queue() -> dict:
    spec = _obj({
        "resourceGroups": RESOURCE_GROUPS,
        "cohort": _s("The cohort this queue borrows from and lends to; unset: none."),
        "queueingStrategy": _s(enum=["StrictFIFO", "BestEffortFIFO"], default="BestEffortFIFO"),
        "namespaceSelector": LABEL_SELECTOR,
        "flavorFungibility": _obj({"whenCanBorrow": _s(enum=["Borrow", "TryNextFlavor"]),
                                   "whenCanPreempt": _s(enum=["Preempt", "TryNextFlavor"])}),
        "preemption": _obj({
            "reclaimWithinCohort": _s(enum=RECLAIM_POLICIES, default="Never"),
            "borrowWithinCohort": _obj({"policy": _s(enum=BORROW_POLICIES, default="Never"),
                                        "maxPriorityThreshold": _i()}),
            "withinClusterQueue": _s(enum=PREEMPTION_POLICIES, default="Never"),
        }),
        "admissionChecks": _list(_s()),
        "stopPolicy": _s(enum=["None", "Hold", "HoldAndDrain"], default="None"),
        "fairSharing": FAIR_SHARING,
    })
    status = _obj({**_status_counts(), "flavorsReservation": FLAVOR_USAGE, "flavorsUsage": FLAVOR_USAGE,
                   "fairSharing": _obj({"weightedShare": {"type": "integer", "format": "int64"}})})
    return crd(GROUP, VERSION, "clusterqueues", "ClusterQueue", short=["cq"], namespaced=False,
               schema=_root(spec, status), columns=_columns(
                   ("Cohort", ".spec.cohort", "string"), ("Strategy", ".spec.queueingStrategy", "string", 1),
                   ("Pending Workloads", ".status.pendingWorkloads", "integer"),
                   ("Admitted Workloads", ".status.admittedWorkloads", "integer", 1)))


def local_queue() -> dict:
    spec = _obj({"clusterQueue": _s("The ClusterQueue this namespace's workloads are queued in."),
                 "stopPolicy": _s(enum=["None", "Hold", "HoldAndDrain"], default="None")})
    status = _obj({**_status_counts(), "flavorsReservation": FLAVOR_USAGE, "flavorUsage": FLAVOR_USAGE})
    return crd(GROUP, VERSION, "localqueues", "LocalQueue", short=["queue", "queues", "lq"],
               schema=_root(spec, status), columns=_columns(
                   ("ClusterQueue", ".spec.clusterQueue", "string"),
                   ("Pending Workloads", ".status.pendingWorkloads", "integer"),
                   ("Admitted Workloads", ".status.admittedWorkloads", "integer")))


def workload_priority_class() -> dict:
    schema = _root(value=_i("The priority; higher is admitted first and may preempt lower."),
                   description=_s())
    schema["required"] = ["value"]
    return crd(GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False, status=False,
               schema=schema, columns=_columns(("Value", ".value", "integer")))


def cohort() -> dict:
    spec = _obj({"parent": _s(), "resourceGroups": RESOURCE_GROUPS, "fairSharing": FAIR_SHARING})
    return crd(GROUP, COHORT_VERSION, "cohorts", "Cohort", namespaced=False, schema=_root(spec, FREE),
               columns=_columns(("Parent", ".spec.parent", "string")))


def workload() -> dict:
    pod_set = _obj({"name": _s(), "count": _i(minimum=0), "minCount": _i(),
                    "template": {**FREE, "description": "The pods' PodTemplateSpec."}}, ["name", "count", "template"])
    spec = _obj({
        "podSets": _list(pod_set, ["name"], minItems=1, maxItems=8),
        "queueName": _s("The LocalQueue in the workload's namespace."),
        "priorityClassName": _s(), "priority": _i(),
        "priorityClassSource": _s(enum=PRIORITY_SOURCES, default=""),
        "active": {"type": "boolean", "default": True},
        "maximumExecutionTimeSeconds": _i(),
    }, ["podSets"])
    assignment = _obj({"name": _s(), "flavors": _map(), "resourceUsage": _map(QUANTITY), "count": _i()}, ["name"])
    status = _obj({
        "admission": _obj({"clusterQueue": _s(), "podSetAssignments": _list(assignment, ["name"])},
                          ["clusterQueue", "podSetAssignments"]),
        "conditions": CONDITIONS,
        "requeueState": _obj({"count": _i(), "requeueAt": _s(format="date-time")}),
        "reclaimablePods": _list(_obj({"name": _s(), "count": _i()}, ["name", "count"]), ["name"]),
        "admissionChecks": _list(FREE),
        "resourceRequests": _list(_obj({"name": _s(), "resources": _map(QUANTITY)}, ["name"]), ["name"]),
    })
    return crd(GROUP, VERSION, "workloads", "Workload", short=["wl"], schema=_root(spec, status), columns=_columns(
        ("Queue", ".spec.queueName", "string"), ("Reserved in", ".status.admission.clusterQueue", "string"),
        ("Admitted", ".status.conditions[?(@.type=='Admitted')].status", "string"),
        ("Finished", ".status.conditions[?(@.type=='Finished')].status", "string")))


def kueue_crds() -> list[dict]:
    """The CRD objects of a Kueue install, in the order `kubectl apply` of its manifests creates them."""
    return [cohort(), cluster_queue(), local_queue(), resource_flavor(), workload(), workload_priority_class()]
