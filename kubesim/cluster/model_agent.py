"""The model agent's behaviour (one per node, as its DaemonSet would run): copy the models the platform chose onto
the node's local disk within a budget, least recently used evicted first, labelling the node with each model it
holds and recording progress as Events on the Node.

The plan is the ConfigMap `model-agent` in the `controlplane` namespace, key `plan`, JSON:
{"budget_bytes": B, "nodes": {"<node>": [{"model": "<name>", "bytes": N}, ...]}}. A copy reads the cluster cache at
its rate (capacity/startup.py), shortened under `--fast-start` like every other wait.
"""

from __future__ import annotations

import asyncio
import json
import logging

from capacity.modelcache import (
    COMPONENT,
    COPIED,
    COPYING,
    EVICTED,
    NOT_COPIED,
    BudgetError,
    NodeDisk,
    copied_message,
    copying_message,
    evicted_message,
)
from capacity.startup import CLUSTER_CACHE_BYTES_PER_S
from enginevocab.labels import model_held_label

log = logging.getLogger(__name__)

NAMESPACE, NAME, KEY = "controlplane", "model-agent", "plan"


class ModelAgent:
    """Every node's model agent in one: reads the plan, copies, evicts, labels, reports."""

    def __init__(self, api, recorder, fast_start: bool):
        self.api = api
        self.recorder = recorder
        self.fast_start = fast_start
        self.disks: dict[str, NodeDisk] = {}

    def copy_seconds(self, nbytes: int) -> float:
        seconds = nbytes / CLUSTER_CACHE_BYTES_PER_S
        return min(seconds, 0.2) if self.fast_start else seconds

    async def plan(self) -> dict:
        config = await self.api.get("v1/configmaps", NAMESPACE, NAME)
        try:
            plan = json.loads(((config or {}).get("data") or {}).get(KEY) or "{}")
        except ValueError:
            return {}
        return plan if isinstance(plan, dict) else {}

    async def _label(self, node_name: str, model: str, held: bool) -> dict | None:
        def change(node: dict) -> None:
            labels = node["metadata"].setdefault("labels", {})
            if held:
                labels[model_held_label(model)] = "true"
            else:
                labels.pop(model_held_label(model), None)

        return await self.api.mutate("v1/nodes", None, node_name, change)

    async def sync_node(self, node_name: str, wanted: list[dict], budget: int) -> None:
        """Copy the node's wanted models it does not hold yet, evicting the least recently used to make room."""
        disk = self.disks.setdefault(node_name, NodeDisk(budget))
        disk.budget_bytes = budget
        node = await self.api.get("v1/nodes", None, node_name)
        if node is None:
            return
        pinned = frozenset(str(w.get("model")) for w in wanted)
        for item in wanted:
            model, nbytes = str(item.get("model")), int(item.get("bytes") or 0)
            if model in disk.held:
                disk.touch(model)
                continue
            try:
                evicted = disk.plan(model, nbytes, pinned - {model})
            except BudgetError as refused:
                await self.recorder.record(node, NOT_COPIED, str(refused), "Warning", COMPONENT, node_name)
                continue
            for old in evicted:
                del disk.held[old]
                await self._label(node_name, old, held=False)
                await self.recorder.record(node, EVICTED, evicted_message(old, model), "Normal", COMPONENT,
                                           node_name)
            await self.recorder.record(node, COPYING, copying_message(model, nbytes), "Normal", COMPONENT, node_name)
            await asyncio.sleep(self.copy_seconds(nbytes))
            disk.admit(model, nbytes)
            node = await self._label(node_name, model, held=True) or node
            await self.recorder.record(node, COPIED, copied_message(model, nbytes, disk.used_bytes, budget), "Normal",
                                       COMPONENT, node_name)

    async def sync(self) -> None:
        plan = await self.plan()
        budget = int(plan.get("budget_bytes") or 0)
        for node_name, wanted in sorted((plan.get("nodes") or {}).items()):
            if budget > 0 and isinstance(wanted, list):
                await self.sync_node(node_name, [w for w in wanted if isinstance(w, dict)], budget)

    async def run(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:  # one bad pass never stops the agent
                log.exception("model agent: pass failed")
            await asyncio.sleep(0.5 if self.fast_start else 10.0)
