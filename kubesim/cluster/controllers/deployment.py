"""The Deployment controller: ReplicaSets per pod template, rolling updates and Deployment status.

The rollout follows upstream `rolling.go`: scale the new ReplicaSet up while the total stays within
`replicas + maxSurge`, scale old ones down while available pods stay at `replicas - maxUnavailable`
or more (unhealthy old pods go first). `Recreate` empties the old ReplicaSets before starting new pods.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from kubesim.cluster.controllers.base import Controller, Informer, controller_of, key_of, owner_ref
from kubesim.cluster.controllers.common import (
    pod_active,
    resolve_int_or_percent,
    set_condition,
    template_hash,
    write_status,
)
from kubesim.cluster.controllers.replicaset import REPLICASETS
from kubesim.cluster.events import now, parse_time

DEPLOYMENTS = "apps/v1/deployments"
COMPONENT = "deployment-controller"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"


def _replicas(obj: dict) -> int:
    return int((obj.get("spec") or {}).get("replicas", 0) or 0)


def _status(obj: dict, name: str) -> int:
    return int((obj.get("status") or {}).get(name, 0) or 0)


def _revision(rs: dict) -> int:
    try:
        return int(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def surge_and_unavailable(deployment: dict) -> tuple[int, int]:
    """maxSurge and maxUnavailable resolved against spec.replicas (never both zero)."""
    desired = _replicas(deployment)
    rolling = (((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate")) or {}
    surge = resolve_int_or_percent(rolling.get("maxSurge"), desired, True, "25%")
    unavailable = resolve_int_or_percent(rolling.get("maxUnavailable"), desired, False, "25%")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, desired)


class DeploymentController(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, deployments: Informer, replicasets: Informer, pods: Informer):
        super().__init__()
        self.api, self.recorder = api, recorder
        self.deployments, self.replicasets, self.pods = deployments, replicasets, pods
        deployments.handlers.append(lambda _t, obj, _old: self.enqueue(key_of(obj)))
        replicasets.handlers.append(self._rs_changed)

    def _rs_changed(self, _type: str, rs: dict, _old: dict | None) -> None:
        ref = controller_of(rs)
        if ref and ref.get("kind") == "Deployment":
            self.enqueue((rs["metadata"].get("namespace") or "", ref["name"]))

    async def reconcile(self, key) -> None:
        deployment = self.deployments.get(*key)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return
        owned = [
            rs
            for rs in self.replicasets.owned_by(deployment["metadata"]["uid"])
            if (controller_of(rs) or {}).get("uid") == deployment["metadata"]["uid"]
        ]
        spec = deployment.get("spec") or {}
        template = spec.get("template") or {}
        hash_ = template_hash(template)
        new_rs = next((rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == hash_), None)
        old = sorted(
            (rs for rs in owned if rs is not new_rs), key=lambda rs: rs["metadata"].get("creationTimestamp", "")
        )
        if spec.get("paused"):
            await self._write_status(deployment, new_rs, owned)
            return
        created = False
        if new_rs is None:
            new_rs = await self._create_rs(deployment, hash_, old)
            created = True
        strategy = ((spec.get("strategy") or {}).get("type")) or "RollingUpdate"
        if strategy == "Recreate":
            await self._recreate(deployment, new_rs, old)
        else:
            await self._rolling(deployment, new_rs, old)
        await self._cleanup(deployment, old)
        await self._write_status(deployment, new_rs, [new_rs, *old], created)

    async def _create_rs(self, deployment: dict, hash_: str, old: list[dict]) -> dict:
        meta = deployment["metadata"]
        template = copy.deepcopy((deployment.get("spec") or {}).get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = hash_
        selector = copy.deepcopy((deployment.get("spec") or {}).get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = hash_
        surge, _ = surge_and_unavailable(deployment)
        revision = max((_revision(rs) for rs in old), default=0) + 1
        desired = _replicas(deployment)
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{hash_}",
                "namespace": meta.get("namespace") or "default",
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {
                    REVISION: str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(desired),
                    "deployment.kubernetes.io/max-replicas": str(desired + surge),
                },
                "ownerReferences": [owner_ref(deployment)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": int((deployment.get("spec") or {}).get("minReadySeconds") or 0),
                "selector": selector,
                "template": template,
            },
        }
        created = await self.api.create(REPLICASETS, rs)
        self.replicasets.apply("ADDED", created)
        return created

    async def _scale(self, deployment: dict, rs: dict, replicas: int) -> dict:
        current = _replicas(rs)
        if current == replicas:
            return rs
        updated = copy.deepcopy(rs)
        updated["spec"]["replicas"] = replicas
        annotations = updated["metadata"].setdefault("annotations", {})
        annotations["deployment.kubernetes.io/desired-replicas"] = str(_replicas(deployment))
        surge, _ = surge_and_unavailable(deployment)
        annotations["deployment.kubernetes.io/max-replicas"] = str(_replicas(deployment) + surge)
        result = await self.api.update(REPLICASETS, updated)
        self.replicasets.apply("MODIFIED", result)
        direction = "up" if replicas > current else "down"
        await self.recorder.record(
            deployment,
            "ScalingReplicaSet",
            f"Scaled {direction} replica set {rs['metadata']['name']} from {current} to {replicas}",
            component=COMPONENT,
        )
        return result

    async def _rolling(self, deployment: dict, new_rs: dict, old: list[dict]) -> None:
        desired = _replicas(deployment)
        surge, max_unavailable = surge_and_unavailable(deployment)
        all_rs = [new_rs, *old]
        # Scale the new ReplicaSet up within replicas + maxSurge.
        if _replicas(new_rs) > desired:
            new_rs = await self._scale(deployment, new_rs, desired)
        elif _replicas(new_rs) < desired:
            total = sum(_replicas(rs) for rs in all_rs)
            room = desired + surge - total
            if room > 0:
                new_rs = await self._scale(
                    deployment, new_rs, _replicas(new_rs) + min(room, desired - _replicas(new_rs))
                )
        # Scale old ReplicaSets down while availability stays at replicas - maxUnavailable.
        old_total = sum(_replicas(rs) for rs in old)
        if old_total == 0:
            return
        all_pods = _replicas(new_rs) + old_total
        min_available = desired - max_unavailable
        new_unavailable = max(_replicas(new_rs) - _status(new_rs, "availableReplicas"), 0)
        budget = all_pods - min_available - new_unavailable
        if budget <= 0:
            return
        scaled_old = []
        for rs in old:  # unhealthy old pods first: removing them costs no availability
            unhealthy = _replicas(rs) - _status(rs, "availableReplicas")
            cut = min(budget, max(unhealthy, 0))
            if cut:
                rs = await self._scale(deployment, rs, _replicas(rs) - cut)
                budget -= cut
            scaled_old.append(rs)
        available = _status(new_rs, "availableReplicas") + sum(_status(rs, "availableReplicas") for rs in scaled_old)
        room = available - min_available
        for rs in scaled_old:
            if room <= 0:
                break
            cut = min(_replicas(rs), room)
            if cut:
                await self._scale(deployment, rs, _replicas(rs) - cut)
                room -= cut

    async def _recreate(self, deployment: dict, new_rs: dict, old: list[dict]) -> None:
        for rs in old:
            if _replicas(rs):
                await self._scale(deployment, rs, 0)
        still_running = any(pod_active(pod) for rs in old for pod in self.pods.owned_by(rs["metadata"]["uid"]))
        if not still_running:
            await self._scale(deployment, new_rs, _replicas(deployment))

    async def _cleanup(self, deployment: dict, old: list[dict]) -> None:
        limit = int((deployment.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [rs for rs in old if _replicas(rs) == 0 and _status(rs, "replicas") == 0]
        for rs in idle[: max(len(idle) - limit, 0)]:
            await self.api.delete(REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"])

    def _progressing(
        self, deployment: dict, conditions: list[dict], rs_name: str, complete: bool, created: bool, counts: tuple
    ) -> list[dict]:
        """The Progressing condition, including ProgressDeadlineExceeded after progressDeadlineSeconds
        without progress (any change of the replica counts counts as progress)."""
        old_status = deployment.get("status") or {}
        before = tuple(
            old_status.get(k, 0) for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
        )
        if complete:
            return set_condition(
                conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
            )
        if created:
            return set_condition(
                conditions, "Progressing", "True", "NewReplicaSetCreated", f'Created new replica set "{rs_name}"'
            )
        current = next((c for c in conditions if c.get("type") == "Progressing"), None)
        deadline = int((deployment.get("spec") or {}).get("progressDeadlineSeconds", 600))
        if current is not None and current.get("reason") == "ProgressDeadlineExceeded" and before == counts:
            return conditions
        last = parse_time((current or {}).get("lastUpdateTime"))
        if before != counts or current is None or current.get("reason") == "NewReplicaSetAvailable" or last is None:
            self.enqueue_after(key_of(deployment), deadline + 0.5)
            conditions = set_condition(
                conditions, "Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.'
            )
            for condition in conditions:
                if condition["type"] == "Progressing":
                    condition["lastUpdateTime"] = now()  # progress was made: the deadline starts again
            return conditions
        if (datetime.now(UTC) - last).total_seconds() > deadline:
            return set_condition(
                conditions,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{rs_name}" has timed out progressing.',
            )
        self.enqueue_after(key_of(deployment), deadline + 0.5)
        return conditions

    async def _write_status(
        self, deployment: dict, new_rs: dict | None, all_rs: list[dict], created: bool = False
    ) -> None:
        desired = _replicas(deployment)
        _, max_unavailable = surge_and_unavailable(deployment)
        replicas = sum(_status(rs, "replicas") for rs in all_rs)
        updated = _status(new_rs, "replicas") if new_rs else 0
        ready = sum(_status(rs, "readyReplicas") for rs in all_rs)
        available = sum(_status(rs, "availableReplicas") for rs in all_rs)
        old_status = deployment.get("status") or {}
        conditions = old_status.get("conditions") or []
        if available >= desired - max_unavailable:
            conditions = set_condition(
                conditions, "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability."
            )
        else:
            conditions = set_condition(
                conditions,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        rs_name = new_rs["metadata"]["name"] if new_rs else ""
        complete = updated == desired and replicas == desired and available == desired
        if new_rs is not None:
            conditions = self._progressing(
                deployment, conditions, rs_name, complete, created, (replicas, updated, ready, available)
            )
        failure = next(
            (
                c
                for rs in all_rs
                for c in (rs.get("status") or {}).get("conditions") or []
                if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
            ),
            None,
        )
        if failure:
            conditions = set_condition(
                conditions, "ReplicaFailure", "True", failure.get("reason", "FailedCreate"), failure.get("message", "")
            )
        else:
            conditions = [c for c in conditions if c.get("type") != "ReplicaFailure"]
        status = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": max(desired - available, 0),
            "conditions": conditions,
        }
        for name in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
            if not status[name]:
                status.pop(name)
        await write_status(self.api, DEPLOYMENTS, self.deployments, deployment, status)
