"""Pod placement: the filters of kube-scheduler's default profile as pure functions over plain dicts.

`place()` picks a node for one pod or returns a `FitError` whose message is the scheduler's
("0/6 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 4 Insufficient
nvidia.com/gpu. preemption: ..."). `place_gang()` places a group of pods all or nothing.
The controller that drives it from the store lives in kubesim/cluster/controllers/scheduling.py.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from kubesim.apiserver.quantities import add, node_allocatable, pod_requests

UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
NODE_NAME = "node(s) didn't match the requested node name"
TOO_MANY_PODS = "Too many pods"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
# Failures that evicting lower-priority pods could not fix (upstream: UnschedulableAndUnresolvable).
_UNRESOLVABLE_PREFIXES = (UNSCHEDULABLE, NODE_AFFINITY, NODE_NAME, POD_AFFINITY, "node(s) had untolerated taint")


@dataclass
class NodeUsage:
    """What is already reserved on a node: summed pod requests and the pod count."""

    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0

    def plus(self, requests: dict[str, int]) -> NodeUsage:
        return NodeUsage(add(self.requested, requests), self.pods + 1)


@dataclass(frozen=True)
class PlacedPod:
    """A pod already on a node, as inter-pod (anti-)affinity sees it."""

    node: str
    namespace: str
    labels: dict


class FitError(Exception):
    """No node fits; `message` is what the FailedScheduling event and PodScheduled condition say."""

    def __init__(self, node_count: int, reasons: dict[str, list[str]]):
        self.node_count = node_count
        self.reasons = reasons  # node name -> its failure reasons
        super().__init__(self.message)

    @property
    def message(self) -> str:
        total = self.node_count
        histogram: dict[str, int] = {}
        preemption: dict[str, int] = {}
        for reasons in self.reasons.values():
            for reason in reasons:
                histogram[reason] = histogram.get(reason, 0) + 1
            unresolvable = any(r.startswith(_UNRESOLVABLE_PREFIXES) for r in reasons)
            verdict = (
                "Preemption is not helpful for scheduling"
                if unresolvable
                else "No preemption victims found for incoming pod"
            )
            preemption[verdict] = preemption.get(verdict, 0) + 1
        message = f"0/{total} nodes are available"
        if histogram:
            message += ": " + ", ".join(sorted(f"{count} {reason}" for reason, count in histogram.items()))
        message += "."
        if preemption:
            tail = ", ".join(sorted(f"{count} {verdict}" for verdict, count in preemption.items()))
            message += f" preemption: 0/{total} nodes are available: {tail}."
        return message


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Whether any toleration matches the taint (key, operator Equal/Exists, value, effect)."""
    for toleration in tolerations or []:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(pod: dict, node: dict) -> dict | None:
    """The first NoSchedule/NoExecute taint of `node` that `pod` does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return taint
    return None


def _expression_matches(expression: dict, value: str | None) -> bool:
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _term_matches(term: dict, node: dict) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no objects
    if not all(_expression_matches(e, labels.get(e.get("key"))) for e in expressions):
        return False
    name = (node.get("metadata") or {}).get("name")
    return all(_expression_matches(f, name if f.get("key") == "metadata.name" else None) for f in fields)


def matches_node_affinity(pod: dict, node: dict) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(_term_matches(term, node) for term in terms)


_ALLOCATABLE: dict[tuple, dict[str, int]] = {}


def allocatable_of(node: dict) -> dict[str, int]:
    """node_allocatable, remembered per distinct allocatable map (placement reads it for every node and pod)."""
    raw = (node.get("status") or {}).get("allocatable") or {}
    key = tuple(raw.items())  # unsorted: a node's map keeps its order, and a second order is only a second entry
    cached = _ALLOCATABLE.get(key)
    if cached is None:
        if len(_ALLOCATABLE) > 10_000:
            _ALLOCATABLE.clear()
        cached = _ALLOCATABLE[key] = node_allocatable(node)
    return cached


def insufficient(requests: dict[str, int], node: dict, usage: NodeUsage) -> list[str]:
    """NodeResourcesFit reasons: "Too many pods" and "Insufficient <resource>" for each short resource."""
    allocatable = allocatable_of(node)
    reasons = []
    if usage.pods + 1 > allocatable.get("pods", 110):
        reasons.append(TOO_MANY_PODS)
    basic = ("cpu", "memory", "ephemeral-storage")
    ordered = [*basic, *sorted(name for name in requests if name not in (*basic, "pods"))]
    for name in ordered:
        want = requests.get(name, 0)
        if want and usage.requested.get(name, 0) + want > allocatable.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def filter_reasons(
    pod: dict,
    node: dict,
    usage: NodeUsage,
    requests: dict[str, int] | None = None,
    placed: list[PlacedPod] | None = None,
    node_labels: dict[str, dict] | None = None,
) -> list[str]:
    """Why `pod` cannot go on `node` (empty: it fits), stopping at the first failing filter like upstream."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and not tolerates(
        (pod.get("spec") or {}).get("tolerations") or [],
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ):
        return [UNSCHEDULABLE]
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"]
    if not matches_node_affinity(pod, node):
        return [NODE_AFFINITY]
    short = insufficient(pod_requests(pod) if requests is None else requests, node, usage)
    if short:
        return short
    return inter_pod_reasons(pod, node, placed or [], node_labels or {})


def label_selector_matches(selector: dict | None, labels: dict) -> bool:
    """A metav1.LabelSelector against labels: None matches nothing, {} matches everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression_matches(e, labels.get(e.get("key"))) for e in selector.get("matchExpressions") or [])


def _pod_terms(pod: dict, kind: str) -> list[dict]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []


def inter_pod_reasons(pod: dict, node: dict, placed: list[PlacedPod], node_labels: dict[str, dict]) -> list[str]:
    """Required pod anti-affinity (no matching pod in the node's topology domain) and pod affinity
    (a matching pod there, unless none exists anywhere and the pod matches its own term)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    labels = (node.get("metadata") or {}).get("labels") or {}

    def matching(term: dict) -> list[PlacedPod]:
        namespaces = term.get("namespaces") or [namespace]
        return [
            p
            for p in placed
            if p.namespace in namespaces and label_selector_matches(term.get("labelSelector"), p.labels)
        ]

    for term in _pod_terms(pod, "podAntiAffinity"):
        key = term.get("topologyKey")
        if key not in labels:
            continue
        if any(node_labels.get(p.node, {}).get(key) == labels[key] for p in matching(term)):
            return [POD_ANTI_AFFINITY]
    for term in _pod_terms(pod, "podAffinity"):
        key = term.get("topologyKey")
        found = matching(term)
        if key in labels and any(node_labels.get(p.node, {}).get(key) == labels[key] for p in found):
            continue
        if not found and label_selector_matches(term.get("labelSelector"), meta.get("labels") or {}):
            continue  # the first pod of a group that wants to be together
        return [POD_AFFINITY]
    return []


def preferred_weight(pod: dict, node: dict) -> int:
    """The NodeAffinity score: the summed weights of the pod's preferred node affinity terms the node matches."""
    preferred = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution") or []
    return sum(int(term.get("weight") or 0) for term in preferred if _term_matches(term.get("preference") or {}, node))


def _score(requests: dict[str, int], node: dict, usage: NodeUsage, preference: int = 0) -> tuple:
    """Lower is better: a node the pod's preferred node affinity weighs more first (nodes holding its weights);
    then GPU pods pack onto the node with the fewest GPUs left (less fragmentation); everything else spreads to
    the least requested CPU."""
    allocatable = allocatable_of(node)
    gpu_left = 0
    for name, want in requests.items():
        if name.endswith("/gpu") and want:
            gpu_left += allocatable.get(name, 0) - usage.requested.get(name, 0) - want
    cpu_share = (usage.requested.get("cpu", 0) + requests.get("cpu", 0)) / max(allocatable.get("cpu", 1), 1)
    has_gpus = any(name.endswith("/gpu") for name in allocatable)
    wants_gpus = any(name.endswith("/gpu") and want for name, want in requests.items())
    return (has_gpus and not wants_gpus, -preference, gpu_left, cpu_share, node["metadata"]["name"])


def place(pod: dict, nodes: list[dict], usage: dict[str, NodeUsage], placed: list[PlacedPod] | None = None) -> str:
    """The name of the node `pod` goes on, or raise FitError. `placed` (pods already bound) is only
    needed for inter-pod (anti-)affinity."""
    requests = pod_requests(pod)
    node_labels = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}) for n in nodes} if placed else {}
    gpus = [(name, want) for name, want in requests.items() if name.endswith("/gpu") and want]
    preferring = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution")
    if len(gpus) == 1 and not (pod.get("spec") or {}).get("nodeName") and not preferring:
        packed = _place_packed(pod, nodes, usage, requests, gpus[0], placed, node_labels)
        if packed is not None:
            return packed
    return place_scanning(pod, nodes, usage, requests, placed, node_labels)


def _place_packed(pod: dict, nodes: list[dict], usage: dict[str, NodeUsage], requests: dict[str, int],
                  gpu: tuple[str, int], placed: list[PlacedPod] | None, node_labels: dict[str, dict]) -> str | None:
    """What `place_scanning` picks for a pod of one GPU resource, filtering only the nodes with the fewest
    GPUs left that could hold it, best score first: the score packs (fewest GPUs left first), so the first
    tier of free GPUs with a node that passes every filter holds the best node, and within a tier the first
    node in score order that passes is it. None when no node passes (the scan then gives every node's
    reasons). On a cluster of a thousand GPU nodes, most full, the scan filtered every node for
    every pod."""
    resource, want = gpu
    tiers: dict[int, list[dict]] = {}
    for node in nodes:
        held = usage.get(node["metadata"]["name"])
        free = allocatable_of(node).get(resource, 0) - (held.requested.get(resource, 0) if held else 0)
        if free >= want:
            tiers.setdefault(free, []).append(node)
    for free in sorted(tiers):
        # best score first (it ends with the node's name, so no two tie), filtering only until one passes
        ranked = [(_score(requests, node, usage.get(node["metadata"]["name"]) or NodeUsage()), i)
                  for i, node in enumerate(tiers[free])]
        heapq.heapify(ranked)
        while ranked:
            score, i = heapq.heappop(ranked)
            node = tiers[free][i]
            if not filter_reasons(pod, node, usage.get(score[-1]) or NodeUsage(), requests, placed, node_labels):
                return score[-1]
    return None


def place_scanning(pod: dict, nodes: list[dict], usage: dict[str, NodeUsage], requests: dict[str, int],
                   placed: list[PlacedPod] | None, node_labels: dict[str, dict]) -> str:
    """`place` by filtering and scoring every node (FitError with every node's reasons when none fits)."""
    wanted = (pod.get("spec") or {}).get("nodeName")
    failures: dict[str, list[str]] = {}
    best: tuple | None = None
    for node in nodes:
        name = node["metadata"]["name"]
        node_usage = usage.get(name) or NodeUsage()
        elsewhere = bool(wanted) and wanted != name
        reasons = [NODE_NAME] if elsewhere else filter_reasons(pod, node, node_usage, requests, placed, node_labels)
        if reasons:
            failures[name] = reasons
            continue
        score = _score(requests, node, node_usage, preferred_weight(pod, node))
        if best is None or score < best:
            best = score
    if best is None:
        raise FitError(len(nodes), failures)
    return best[-1]


def place_gang(
    pods: list[dict], nodes: list[dict], usage: dict[str, NodeUsage], placed: list[PlacedPod] | None = None
) -> dict[str, str]:
    """Place every pod of a group or none: pod name -> node name, or the FitError of the first misfit."""
    trial = dict(usage)
    trial_placed = list(placed or [])
    placement: dict[str, str] = {}
    for pod in pods:
        node_name = place(pod, nodes, trial, trial_placed)
        trial[node_name] = (trial.get(node_name) or NodeUsage()).plus(pod_requests(pod))
        meta = pod.get("metadata") or {}
        trial_placed.append(PlacedPod(node_name, meta.get("namespace") or "default", meta.get("labels") or {}))
        placement[meta["name"]] = node_name
    return placement


def usage_by_node(pods: list[dict]) -> dict[str, NodeUsage]:
    """Reserved resources per node from bound pods that still hold them (not Succeeded/Failed)."""
    usage: dict[str, NodeUsage] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        usage[node_name] = (usage.get(node_name) or NodeUsage()).plus(pod_requests(pod))
    return usage

