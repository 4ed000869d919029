"""The disruption controller (PodDisruptionBudget status from the pods its selector matches) and the
Eviction subresource that honours those budgets."""

from __future__ import annotations

import math

from aiohttp import web

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller, Informer, SelectorIndex, key_of
from kubesim.cluster.controllers.common import pod_active, pod_ready, selector_matches, set_condition, write_status

PDBS = "policy/v1/poddisruptionbudgets"


def _amount(value, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = float(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def budget_status(pdb: dict, pods: list[dict]) -> dict:
    """expectedPods, currentHealthy, desiredHealthy and disruptionsAllowed as the disruption controller
    computes them (percentages of minAvailable round up, of maxUnavailable round down)."""
    spec = pdb.get("spec") or {}
    matching = [
        p
        for p in pods
        if pod_active(p) and selector_matches(spec.get("selector"), (p.get("metadata") or {}).get("labels") or {})
    ]
    expected = len(matching)
    healthy = sum(1 for p in matching if pod_ready(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(expected - _amount(spec["maxUnavailable"], expected, False), 0)
    elif spec.get("minAvailable") is not None:
        desired = _amount(spec["minAvailable"], expected, True)
    else:
        desired = expected
    allowed = max(healthy - desired, 0)
    status = {
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "expectedPods": expected,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": allowed,
    }
    old = (pdb.get("status") or {}).get("conditions") or []
    if allowed > 0:
        status["conditions"] = set_condition(old, "DisruptionAllowed", "True", "SufficientPods", "")
    else:
        status["conditions"] = set_condition(old, "DisruptionAllowed", "False", "InsufficientPods", "")
    for condition in status["conditions"]:
        condition.pop("lastUpdateTime", None)  # PDB conditions are metav1.Condition
        condition["observedGeneration"] = status["observedGeneration"]
    return status


def _as_counted(pod: dict) -> tuple:
    """Everything of a pod that `budget_status` reads."""
    return (pod.get("metadata") or {}).get("labels"), pod_active(pod), pod_ready(pod)


class DisruptionController(Controller):
    name = "disruption-controller"

    def __init__(self, api, budgets: Informer, pods: Informer):
        super().__init__()
        self.api, self.budgets, self.pods = api, budgets, pods
        self.selecting = SelectorIndex(budgets, lambda pdb: ((pdb.get("spec") or {}).get("selector") or {}).get(
            "matchLabels"))
        budgets.handlers.append(lambda _t, pdb, _old: self.enqueue(key_of(pdb)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, event_type: str, pod: dict, old: dict | None) -> None:
        if event_type == "MODIFIED" and old is not None and _as_counted(pod) == _as_counted(old):
            return  # most pod updates (container states, addresses) change nothing a budget counts
        # A budget counts only the pods its selector matches, so only those budgets need a look.
        namespace = pod["metadata"].get("namespace") or ""
        for candidate in (pod, old):
            labels = (candidate or {}).get("metadata", {}).get("labels") or {}
            for pdb in self.selecting.candidates(namespace, labels) if candidate else ():
                if selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                    self.enqueue(key_of(pdb))

    async def reconcile(self, key) -> None:
        pdb = self.budgets.get(*key)
        if pdb is None:
            return
        match_labels = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels")
        status = budget_status(pdb, self.pods.select(key[0], match_labels))
        await write_status(self.api, PDBS, self.budgets, pdb, status)


def eviction_route(store):
    """`POST /api/v1/namespaces/{ns}/pods/{name}/eviction` (policy/v1 Eviction): delete the pod unless a
    PodDisruptionBudget of its namespace would be violated, which is a 429 as from the apiserver."""

    async def evict(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = store.get("v1/pods", namespace, name)
        labels = pod["metadata"].get("labels") or {}
        pods, _ = store.list("v1/pods", namespace)
        budgets, _ = store.list(PDBS, namespace)
        for pdb in budgets:
            if not selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                continue
            status = budget_status(pdb, pods)
            healthy_budget = status["currentHealthy"] >= status["desiredHealthy"]
            if (pod_ready(pod) and status["disruptionsAllowed"] <= 0) or (not pod_ready(pod) and not healthy_budget):
                pdb_name = pdb["metadata"]["name"]
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": (
                                    f"The disruption budget {pdb_name} needs {status['desiredHealthy']} healthy "
                                    f"pods and has {status['currentHealthy']} currently"
                                ),
                            }
                        ]
                    },
                )
        store.delete("v1/pods", namespace, name)
        return web.json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
        )

    return ("POST", "/api/v1/namespaces/{namespace}/pods/{name}/eviction", evict)
