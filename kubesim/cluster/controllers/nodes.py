"""Node lifecycle: registers the `--nodes` set and acts on node failures from the fault injector.

A failed node goes NotReady (conditions Unknown, `node.kubernetes.io/unreachable` taints, as the node
lifecycle controller does when a kubelet stops posting status); its pods are evicted so their
controllers recreate them on healthy nodes. A recovered node becomes Ready and loses the taints.
"""

from __future__ import annotations

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.common import PODS
from kubesim.cluster.events import now
from kubesim.cluster.nodes import ready_conditions

NODES = "v1/nodes"
COMPONENT = "node-controller"
UNREACHABLE = "node.kubernetes.io/unreachable"


async def register_nodes(api, nodes: list[dict]) -> None:
    """Create the nodes that do not exist yet (a restored --state keeps its own), with Ready status."""
    for node in nodes:
        name = node["metadata"]["name"]
        if await api.get(NODES, None, name) is not None:
            # Restored from --state: the kubelet is back, whatever the snapshot said.
            await api.mutate(NODES, None, name, _drop_unreachable)
            await api.mutate(NODES, None, name, lambda stored, wanted=node: _same_pod_network(stored, wanted))
            await api.set_status(NODES, None, name, lambda s: {**s, "conditions": ready_conditions(True, now())})
            continue
        created = await api.create(NODES, node)
        status = dict(node["status"])
        status["conditions"] = ready_conditions(True, now())
        created["status"] = status
        await api.update_status(NODES, created)


def _same_pod_network(stored: dict, wanted: dict) -> None:
    """A --state saved with the other --pod-network takes this run's pod range (loopback or overlay)."""
    cidr = (stored.get("spec") or {}).get("podCIDR") or ""
    if cidr.startswith("127.") != wanted["spec"]["podCIDR"].startswith("127."):
        stored["spec"]["podCIDR"] = wanted["spec"]["podCIDR"]
        stored["spec"]["podCIDRs"] = list(wanted["spec"]["podCIDRs"])


def _drop_unreachable(node: dict) -> None:
    taints = [t for t in node.setdefault("spec", {}).get("taints") or [] if t.get("key") != UNREACHABLE]
    if taints:
        node["spec"]["taints"] = taints
    else:
        node["spec"].pop("taints", None)


class NodeLifecycle:
    """Applies node failure and recovery."""

    def __init__(self, api, recorder, kubelet, pods_informer):
        self.api, self.recorder, self.kubelet, self.pods = api, recorder, kubelet, pods_informer

    async def set_failed(self, failed: set[str]) -> None:
        for node in await self.api.list(NODES):
            name = node["metadata"]["name"]
            down = name in failed
            was_down = name in self.kubelet.failed_nodes
            if down and not was_down:
                await self.fail(node)
            elif was_down and not down:
                await self.recover(node)

    async def fail(self, node: dict) -> None:
        name = node["metadata"]["name"]
        self.kubelet.failed_nodes.add(name)

        def taint(current: dict) -> None:
            taints = [t for t in current["spec"].get("taints") or [] if t.get("key") != UNREACHABLE]
            taints += [
                {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now()},
                {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now()},
            ]
            current["spec"]["taints"] = taints

        await self.api.mutate(NODES, None, name, taint)
        await self.api.set_status(NODES, None, name, lambda s: {**s, "conditions": ready_conditions(False, now())})
        await self.recorder.record(
            node, "NodeNotReady", f"Node {name} status is now: NodeNotReady", "Normal", COMPONENT
        )
        await self.kubelet.stop_node(name)
        for pod in list(self.pods.list()):
            if (pod.get("spec") or {}).get("nodeName") != name:
                continue
            meta = pod["metadata"]
            await self.recorder.record(
                pod,
                "TaintManagerEviction",
                f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
                "Normal",
                "taint-eviction-controller",
            )
            try:
                await self.api.delete(PODS, meta["namespace"], meta["name"])
            except ApiError as error:
                if error.code != 404:
                    raise

    async def recover(self, node: dict) -> None:
        name = node["metadata"]["name"]
        self.kubelet.failed_nodes.discard(name)

        await self.api.mutate(NODES, None, name, _drop_unreachable)
        await self.api.set_status(NODES, None, name, lambda s: {**s, "conditions": ready_conditions(True, now())})
        await self.recorder.record(node, "NodeReady", f"Node {name} status is now: NodeReady", "Normal", COMPONENT)
