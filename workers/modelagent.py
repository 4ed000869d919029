"""The model agent for real clusters: one per GPU node (the DaemonSet `apps/serving/rendering/modelagent.py` renders),
run as `python -m workers.modelagent`.

Each pass it reads the platform's plan (the ConfigMap `controlplane/model-agent`, mounted as a file:
`{"budget_bytes": B, "nodes": {"<node>": [{"model", "bytes", "source"}]}}`) and, for its own node:
- copies each planned model it does not hold from the cluster cache (`<cache>/<source>`, once that copy is complete)
  to the node's disk (`<models>/<model>`, a `.complete` file written last), within the budget;
- evicts the least recently used model no longer planned when the budget has no room, never one a pod on the node
  reads (an engine pod's weights annotation names its model), and refuses a model that cannot fit;
- labels the node `models.controlplane.io/<model>: "true"` for each model it holds and removes stale labels;
- records `ModelCopying`, `ModelCopied`, `ModelEvicted` and `ModelNotCopied` Events on the Node.

The budget counts each model at the plan's `bytes` (its weights), as the control plane's prefetch plan does. A model
counts as used when it is planned or read by a pod: the `.complete` file's modification time is its last use.

It speaks to the API server with the official Kubernetes client only, and imports nothing of Django: it runs in the
control plane's image with its own service account (nodes get/patch, events create, pods list).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client, config

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
from enginevocab.labels import MODEL_HELD_PREFIX, WEIGHTS_ANNOTATION, model_held_label

log = logging.getLogger("modelagent")

COMPLETE = ".complete"  # written last in a copy (and by the fetch script in the cluster cache)
EVENT_NAMESPACE = "default"  # where Events about cluster-scoped objects (Nodes) go


class NodeAgent:
    """The agent of one node: `core` a kubernetes CoreV1Api, `plan_path` the plan file, `cache` the cluster cache's
    root, `models` the node's model directory."""

    def __init__(self, core: client.CoreV1Api, node: str, plan_path: Path, cache: Path, models: Path):
        self.core, self.node = core, node
        self.plan_path, self.cache, self.models = Path(plan_path), Path(cache), Path(models)
        self._said: set[tuple[str, str]] = set()  # waiting and refusal Events already recorded by this process

    # --- what the node should hold and what it holds ---------------------------------------------------------

    def plan(self) -> tuple[int, list[dict]]:
        """(budget bytes, the models planned for this node); (0, []) for a missing or malformed plan."""
        try:
            plan = json.loads(self.plan_path.read_text())
        except (OSError, ValueError):
            return 0, []
        if not isinstance(plan, dict):
            return 0, []
        wanted = (plan.get("nodes") or {}).get(self.node) or []
        items = [w for w in wanted if isinstance(w, dict) and isinstance(w.get("model"), str)
                 and "/" not in w["model"] and not w["model"].startswith(".")]
        return int(plan.get("budget_bytes") or 0), items

    def disk(self, budget: int) -> NodeDisk:
        """The complete copies on the node's disk, least recently used first, at the bytes recorded with each."""
        held = []
        for done in self.models.glob(f"*/{COMPLETE}"):
            try:
                nbytes = int(json.loads(done.read_text() or "{}").get("bytes") or 0)
            except ValueError:
                nbytes = 0
            held.append((done.stat().st_mtime, done.parent.name, nbytes))
        return NodeDisk(budget, OrderedDict((name, nbytes) for _, name, nbytes in sorted(held)))

    def in_use(self) -> set[str]:
        """The models that pods running on this node read (their weights annotation)."""
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
        models = set()
        for pod in pods:
            if (pod.status and pod.status.phase) in ("Succeeded", "Failed"):
                continue
            raw = ((pod.metadata and pod.metadata.annotations) or {}).get(WEIGHTS_ANNOTATION)
            try:
                weights = json.loads(raw) if raw else {}
            except ValueError:
                continue
            if isinstance(weights, dict) and isinstance(weights.get("model"), str):
                models.add(weights["model"])
        return models

    # --- the cluster: labels and Events -------------------------------------------------------------------

    def label(self, changes: dict[str, bool]) -> None:
        """Set (True) or remove (False) each model's label on the node, in one patch."""
        if changes:
            labels = {model_held_label(m): ("true" if held else None) for m, held in changes.items()}
            self.core.patch_node(self.node, {"metadata": {"labels": labels}})

    def event(self, reason: str, message: str, event_type: str = "Normal") -> None:
        node = self.core.read_node(self.node)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{self.node}.{uuid.uuid4().hex[:16]}", "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": node.metadata.uid},
            "reason": reason, "message": message, "type": event_type,
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT, "reportingInstance": self.node,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.core.create_namespaced_event(EVENT_NAMESPACE, body)
        except client.ApiException as exc:  # an Event lost is no reason to stop copying
            log.warning("model agent: event %s not recorded: %s", reason, exc.reason)

    def say_once(self, reason: str, message: str, event_type: str) -> None:
        if (reason, message) not in self._said:
            self._said.add((reason, message))
            self.event(reason, message, event_type)

    # --- one pass ------------------------------------------------------------------------------------------

    def sync(self) -> None:
        """Copy, evict, label and report for this node, as the plan says."""
        budget, wanted = self.plan()
        disk = self.disk(budget)
        self._fix_labels(set(disk.held))
        if budget <= 0:
            return
        used = self.in_use()
        planned = {w["model"] for w in wanted}
        for model in planned | used:
            if model in disk.held:
                os.utime(self.models / model / COMPLETE)  # planned or read: used now
                disk.touch(model)
        for item in wanted:
            if item["model"] not in disk.held:
                self._copy(disk, item, frozenset((planned | used) - {item["model"]}))

    def _fix_labels(self, held: set[str]) -> None:
        labels = self.core.read_node(self.node).metadata.labels or {}
        prefix = MODEL_HELD_PREFIX + "/"
        labelled = {k[len(prefix):] for k, v in labels.items() if k.startswith(prefix) and v == "true"}
        self.label({m: True for m in held - labelled} | {m: False for m in labelled - held})

    def _copy(self, disk: NodeDisk, item: dict, pinned: frozenset[str]) -> None:
        model, nbytes = item["model"], int(item.get("bytes") or 0)
        source = (self.cache / str(item.get("source") or "")).resolve()
        if not source.is_relative_to(self.cache.resolve()) or not (source / COMPLETE).is_file():
            self.say_once(NOT_COPIED, f"{model}: the cluster cache has no complete copy at {item.get('source')} yet",
                          "Normal")
            return
        try:
            evict = disk.plan(model, nbytes, pinned)
        except BudgetError as refused:
            self.say_once(NOT_COPIED, str(refused), "Warning")
            return
        for old in evict:
            shutil.rmtree(self.models / old, ignore_errors=True)
            del disk.held[old]
            self.label({old: False})
            self.event(EVICTED, evicted_message(old, model))
        self.event(COPYING, copying_message(model, nbytes))
        partial, dest = self.models / f".{model}.partial", self.models / model
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns(COMPLETE))
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
        (dest / COMPLETE).write_text(json.dumps({"bytes": nbytes}))
        disk.admit(model, nbytes)
        self.label({model: True})
        self.event(COPIED, copied_message(model, nbytes, disk.used_bytes, disk.budget_bytes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.modelagent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, required=True, help="the plan file (the ConfigMap's key, mounted)")
    parser.add_argument("--cache", type=Path, required=True, help="the cluster cache's root")
    parser.add_argument("--models", type=Path, required=True, help="the node's model directory")
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="this node (default $NODE_NAME)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between passes")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    args = parser.parse_args(argv)
    if not args.node:
        parser.error("--node or NODE_NAME is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    args.models.mkdir(parents=True, exist_ok=True)
    agent = NodeAgent(client.CoreV1Api(), args.node, args.plan, args.cache, args.models)
    while True:
        try:
            agent.sync()
        except Exception:  # one bad pass never stops the agent
            log.exception("model agent: pass failed")
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
