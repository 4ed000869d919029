"""The ReplicaSet controller: keeps `spec.replicas` pods of the template alive and reports their status."""

from __future__ import annotations

import copy
import random

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller, Informer, controller_of, key_of
from kubesim.cluster.controllers.common import (
    PODS,
    delete_pod,
    drop_condition,
    pod_active,
    pod_available,
    pod_from_template,
    pod_ready,
    random_suffix,
    selector_matches,
    set_condition,
)

REPLICASETS = "apps/v1/replicasets"
COMPONENT = "replicaset-controller"


def deletion_rank(pod: dict) -> tuple:
    """Which pods a scale-down removes first: unscheduled, then pending, then not ready, then newest."""
    status = pod.get("status") or {}
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        status.get("phase") == "Running",
        pod_ready(pod),
        # newest first: invert the creation timestamp ordering
        "".join(chr(0x10FFFF - ord(ch)) for ch in (pod.get("metadata") or {}).get("creationTimestamp", "")),
    )


class ReplicaSetController(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, replicasets: Informer, pods: Informer, rng: random.Random):
        super().__init__()
        self.api, self.recorder, self.replicasets, self.pods, self.rng = api, recorder, replicasets, pods, rng
        replicasets.handlers.append(lambda _t, obj, _old: self.enqueue(key_of(obj)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, _type: str, pod: dict, old: dict | None) -> None:
        for candidate in (pod, old):
            ref = controller_of(candidate or {})
            if ref and ref.get("kind") == "ReplicaSet":
                self.enqueue(((pod["metadata"].get("namespace") or ""), ref["name"]))

    def owned_pods(self, rs: dict) -> list[dict]:
        labels_ok = (rs.get("spec") or {}).get("selector")
        return [
            pod
            for pod in self.pods.owned_by(rs["metadata"]["uid"])
            if (controller_of(pod) or {}).get("uid") == rs["metadata"]["uid"]
            and selector_matches(labels_ok, (pod["metadata"].get("labels") or {}))
        ]

    async def reconcile(self, key) -> None:
        rs = self.replicasets.get(*key)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return
        spec = rs.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        active = [pod for pod in self.owned_pods(rs) if pod_active(pod)]
        failure = None
        if len(active) < desired:
            failure = await self._create(rs, desired - len(active))
        elif len(active) > desired:
            for pod in sorted(active, key=deletion_rank)[: len(active) - desired]:
                await delete_pod(self.api, self.pods, pod)
                await self.recorder.record(
                    rs, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}", component=COMPONENT
                )
        await self._status(rs, failure)

    async def _create(self, rs: dict, count: int) -> str | None:
        template = (rs.get("spec") or {}).get("template") or {}
        for _ in range(count):
            name = f"{rs['metadata']['name']}-{random_suffix(self.rng)}"
            pod = pod_from_template(rs, template, name)
            try:
                created = await self.api.create(PODS, pod)
            except ApiError as error:
                if error.code == 409:
                    continue  # name collision: try again next round
                message = f"Error creating: {error.message}"
                await self.recorder.record(rs, "FailedCreate", message, "Warning", COMPONENT)
                return error.message
            self.pods.apply("ADDED", created)  # counted from now on, before its watch event arrives
            await self.recorder.record(rs, "SuccessfulCreate", f"Created pod: {name}", component=COMPONENT)
        return None

    async def _status(self, rs: dict, failure: str | None) -> None:
        min_ready = int((rs.get("spec") or {}).get("minReadySeconds") or 0)
        # Read the pods again: creations and deletions above have landed in the cache by now or will
        # trigger another reconcile when they do.
        active = [pod for pod in self.owned_pods(rs) if pod_active(pod)]
        ready = [pod for pod in active if pod_ready(pod)]
        available = [pod for pod in ready if pod_available(pod, min_ready)]
        if len(available) < len(ready):
            self.enqueue_after(key_of(rs), 1.0)
        template_labels = ((rs.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
        fully = [
            p
            for p in active
            if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in template_labels.items())
        ]
        old = rs.get("status") or {}
        conditions = old.get("conditions") or []
        if failure:
            conditions = set_condition(conditions, "ReplicaFailure", "True", "FailedCreate", failure)
        elif len(active) >= int((rs.get("spec") or {}).get("replicas", 1)):
            conditions = drop_condition(conditions, "ReplicaFailure")
        status = {
            "replicas": len(active),
            "fullyLabeledReplicas": len(fully),
            "readyReplicas": len(ready),
            "availableReplicas": len(available),
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        if conditions:
            status["conditions"] = conditions
        for name in ("readyReplicas", "availableReplicas", "fullyLabeledReplicas"):
            if not status[name]:
                status.pop(name)  # the apiserver omits zero counts (omitempty)
        if status != old:
            updated = copy.deepcopy(rs)
            updated["status"] = status
            await self.api.update_status(REPLICASETS, updated)
