"""The scheduler loop: binds pending pods to nodes with kubesim/cluster/placement.py, or reports why it cannot.

Usage per node is kept incrementally from the pod informer plus the placements made but not yet seen
back, so a placement costs one pass over the nodes. LeaderWorkerSet groups (pods sharing the
`leaderworkerset.sigs.k8s.io/group-key` label) are placed all or nothing once every member exists and none is
held by a scheduling gate (Kueue's, until the group is admitted).
Unschedulable pods are retried when capacity frees up or nodes change.
"""

from __future__ import annotations

import time

from kubesim.apiserver.quantities import pod_requests
from kubesim.cluster.controllers.base import Controller, Informer, key_of
from kubesim.cluster.controllers.common import PODS, pod_active
from kubesim.cluster.events import now
from kubesim.cluster.placement import FitError, NodeUsage, PlacedPod, place, place_gang

COMPONENT = "default-scheduler"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
GROUP_SIZE = "leaderworkerset.sigs.k8s.io/size"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def _gang(pod: dict) -> tuple[str, str] | None:
    meta = pod.get("metadata") or {}
    group = (meta.get("labels") or {}).get(GROUP_KEY)
    return (meta.get("namespace") or "", group) if group else None


class Scheduler(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, pods: Informer, nodes: Informer):
        super().__init__()
        self.api, self.recorder, self.pods, self.nodes = api, recorder, pods, nodes
        self.usage: dict[str, NodeUsage] = {}
        self._holding: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}  # pod -> (node, requests)
        self._placed: dict[tuple[str, str], PlacedPod] = {}  # for inter-pod (anti-)affinity
        self.unschedulable: set[tuple[str, str]] = set()
        self.gated: set[tuple[str, str]] = set()  # pods held by scheduling gates, already marked so
        self.placements = 0
        self.placement_seconds = 0.0
        pods.handlers.append(self._pod_changed)
        self._sorted_nodes: list[dict] | None = None  # by name, until a node changes
        nodes.handlers.append(self._node_changed)

    # --- bookkeeping ------------------------------------------------------------------------------

    def _hold(self, key: tuple[str, str], node: str, pod: dict) -> None:
        self._release(key)
        requests = pod_requests(pod)
        self._holding[key] = (node, requests)
        self._placed[key] = PlacedPod(node, key[0] or "default", dict(pod["metadata"].get("labels") or {}))
        usage = self.usage.get(node) or NodeUsage()
        self.usage[node] = usage.plus(requests)

    def _release(self, key: tuple[str, str]) -> bool:
        self._placed.pop(key, None)
        held = self._holding.pop(key, None)
        if held is None:
            return False
        node, requests = held
        usage = self.usage.get(node) or NodeUsage()
        self.usage[node] = NodeUsage({k: v - requests.get(k, 0) for k, v in usage.requested.items()}, usage.pods - 1)
        return True

    def _pod_changed(self, event_type: str, pod: dict, _old: dict | None) -> None:
        key = key_of(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if event_type == "DELETED" or (node and not pod_active(pod)):
            self.unschedulable.discard(key)
            self.gated.discard(key)
            if self._release(key):
                self.retry_unschedulable()
            return
        if node:
            self.unschedulable.discard(key)
            if key not in self._holding or self._holding[key][0] != node:
                self._hold(key, node, pod)
            return
        if (pod.get("spec") or {}).get("schedulerName", COMPONENT) != COMPONENT:
            return
        if (pod.get("spec") or {}).get("schedulingGates"):
            if key in self.gated:
                return  # its own status writes change nothing until a gate is lifted
        else:
            self.gated.discard(key)
        if key not in self.unschedulable or event_type == "ADDED":
            self.enqueue(_gang(pod) or key)

    def _node_changed(self, _type: str, _node: dict, _old: dict | None) -> None:
        self._sorted_nodes = None
        self.retry_unschedulable()

    def retry_unschedulable(self) -> None:
        for key in list(self.unschedulable):
            pod = self.pods.get(*key)
            if pod is None:
                self.unschedulable.discard(key)
                continue
            self.enqueue(_gang(pod) or key)

    # --- scheduling ---------------------------------------------------------------------------------

    def schedulable_nodes(self) -> list[dict]:
        if self._sorted_nodes is None:  # sorted once per change of a node, not once per pod placed
            self._sorted_nodes = sorted(self.nodes.list(), key=lambda node: node["metadata"]["name"])
        return self._sorted_nodes

    async def reconcile(self, key) -> None:
        namespace, name = key
        pod = self.pods.get(namespace, name)
        if pod is not None and _gang(pod) is None:
            await self._schedule_one(pod)
            return
        await self._schedule_gang(namespace, name)

    async def _schedule_one(self, pod: dict) -> None:
        if (pod.get("spec") or {}).get("nodeName") or not pod_active(pod) or key_of(pod) in self._holding:
            return
        if await self._hold_gated([pod]):
            return
        started = time.perf_counter()
        try:
            affinity = (pod.get("spec") or {}).get("affinity") or {}
            wants_pods = "podAffinity" in affinity or "podAntiAffinity" in affinity
            placed = list(self._placed.values()) if wants_pods else None  # only then worth the copy
            node = place(pod, self.schedulable_nodes(), self.usage, placed)
        except FitError as error:
            await self._unschedulable(pod, error.message)
            return
        finally:
            self.placement_seconds += time.perf_counter() - started
        await self._bind(pod, node)

    async def _schedule_gang(self, namespace: str, group: str) -> None:
        members = [
            pod
            for pod in self.pods.list(namespace)
            if (pod["metadata"].get("labels") or {}).get(GROUP_KEY) == group and pod_active(pod)
        ]
        if not members:
            return
        try:
            size = int((members[0]["metadata"].get("annotations") or {}).get(GROUP_SIZE, len(members)))
        except ValueError:
            size = len(members)
        if len(members) < size:
            return  # the rest of the group is still being created
        waiting = sorted(
            (p for p in members if not (p.get("spec") or {}).get("nodeName") and key_of(p) not in self._holding),
            key=lambda p: p["metadata"]["name"],
        )
        if not waiting or await self._hold_gated(waiting):
            return
        started = time.perf_counter()
        try:
            placement = place_gang(waiting, self.schedulable_nodes(), self.usage, list(self._placed.values()))
        except FitError as error:
            for pod in waiting:
                await self._unschedulable(pod, error.message)
            return
        finally:
            self.placement_seconds += time.perf_counter() - started
        for pod in waiting:
            await self._bind(pod, placement[pod["metadata"]["name"]])

    async def _bind(self, pod: dict, node: str) -> None:
        key = key_of(pod)
        self._hold(key, node, pod)

        def bind(current: dict) -> None:
            current["spec"]["nodeName"] = node

        try:
            bound = await self.api.mutate(PODS, key[0], key[1], bind)
        except Exception:
            self._release(key)
            raise
        if bound is None:
            self._release(key)
            return
        self.unschedulable.discard(key)
        self.placements += 1
        self.pods.apply("MODIFIED", bound)
        await self.recorder.record(
            bound, "Scheduled", f"Successfully assigned {key[0]}/{key[1]} to {node}", component=COMPONENT
        )

    async def _unschedulable(self, pod: dict, message: str) -> None:
        self.unschedulable.add(key_of(pod))
        if await self._not_scheduled(pod, "Unschedulable", message):
            await self.recorder.record(pod, "FailedScheduling", message, "Warning", COMPONENT)

    async def _not_scheduled(self, pod: dict, reason: str, message: str) -> bool:
        """Set `PodScheduled=False` with `reason`; True when its message changed."""
        key = key_of(pod)

        def status(current: dict) -> dict:
            conditions = [c for c in current.get("conditions") or [] if c.get("type") != "PodScheduled"]
            old = next((c for c in current.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
            if old.get("message") == message and old.get("status") == "False":
                conditions.append(old)
            else:
                conditions.append(
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": now(),
                        "reason": reason,
                        "message": message,
                    }
                )
            current["phase"] = "Pending"
            current["conditions"] = conditions
            return current

        before = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        updated = await self.api.set_status(PODS, key[0], key[1], status)
        if updated is not None:
            self.pods.apply("MODIFIED", updated)
        return before.get("message") != message

    async def _hold_gated(self, pods: list[dict]) -> bool:
        """Pods with scheduling gates wait, as kube-scheduler's PreEnqueue keeps them out of its queue (a group
        waits while any member is gated); True when some did. Removing the last gate brings them back."""
        gated = [pod for pod in pods if (pod.get("spec") or {}).get("schedulingGates")]
        for pod in gated:
            self.gated.add(key_of(pod))
            await self._not_scheduled(pod, "SchedulingGated", GATED_MESSAGE)
        return bool(gated)
