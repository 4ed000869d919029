"""The StatefulSet controller: pods `<name>-<ordinal>` created in order (OrderedReady) or all at once
(Parallel), removed from the highest ordinal, and rolled from the highest ordinal down on a template change."""

from __future__ import annotations

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller, Informer, controller_of, key_of
from kubesim.cluster.controllers.common import (
    PODS,
    delete_pod,
    pod_active,
    pod_from_template,
    pod_ready,
    template_hash,
    write_status,
)

STATEFULSETS = "apps/v1/statefulsets"
COMPONENT = "statefulset-controller"
REVISION_LABEL = "controller-revision-hash"


class StatefulSetController(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, statefulsets: Informer, pods: Informer):
        super().__init__()
        self.api, self.recorder, self.statefulsets, self.pods = api, recorder, statefulsets, pods
        statefulsets.handlers.append(lambda _t, sts, _old: self.enqueue(key_of(sts)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, _type: str, pod: dict, old: dict | None) -> None:
        ref = controller_of(pod) or controller_of(old or {})
        if ref and ref.get("kind") == "StatefulSet":
            self.enqueue((pod["metadata"].get("namespace") or "", ref["name"]))

    async def reconcile(self, key) -> None:
        sts = self.statefulsets.get(*key)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return
        spec = sts.get("spec") or {}
        name = sts["metadata"]["name"]
        desired = int(spec.get("replicas", 1))
        revision = f"{name}-{template_hash(spec.get('template') or {})}"
        parallel = spec.get("podManagementPolicy") == "Parallel"
        pods = {p["metadata"]["name"]: p for p in self.pods.owned_by(sts["metadata"]["uid"]) if pod_active(p)}
        # Create missing ordinals in order; OrderedReady waits for each predecessor to be Ready.
        for ordinal in range(desired):
            pod_name = f"{name}-{ordinal}"
            if pod_name in pods:
                if not parallel and not pod_ready(pods[pod_name]):
                    break
                continue
            labels = {
                REVISION_LABEL: revision,
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(ordinal),
            }
            pod = pod_from_template(sts, spec.get("template") or {}, pod_name, labels)
            pod["spec"].setdefault("hostname", pod_name)
            if spec.get("serviceName"):
                pod["spec"].setdefault("subdomain", spec["serviceName"])
            try:
                self.pods.apply("ADDED", await self.api.create(PODS, pod))
            except ApiError as error:
                if error.code == 409:
                    break
                await self.recorder.record(
                    sts,
                    "FailedCreate",
                    f"create Pod {pod_name} in StatefulSet {name} failed error: {error.message}",
                    "Warning",
                    COMPONENT,
                )
                break
            await self.recorder.record(
                sts, "SuccessfulCreate", f"create Pod {pod_name} in StatefulSet {name} successful", component=COMPONENT
            )
            if not parallel:
                break
        # Remove ordinals beyond replicas, highest first.
        extra = sorted(
            (p for n, p in pods.items() if _ordinal(n, name) >= desired),
            key=lambda p: -_ordinal(p["metadata"]["name"], name),
        )
        for pod in extra[: None if parallel else 1]:
            await self._delete(sts, pod)
        # Rolling update: replace the highest outdated pod once every pod is Ready.
        current = [p for n, p in pods.items() if 0 <= _ordinal(n, name) < desired]
        outdated = [p for p in current if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision]
        if outdated and not extra and all(pod_ready(p) for p in current) and len(current) == desired:
            strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
            if strategy == "RollingUpdate":
                await self._delete(sts, max(outdated, key=lambda p: _ordinal(p["metadata"]["name"], name)))
        await self._status(sts, revision)

    async def _delete(self, sts: dict, pod: dict) -> None:
        meta = pod["metadata"]
        await delete_pod(self.api, self.pods, pod)
        await self.recorder.record(
            sts,
            "SuccessfulDelete",
            f"delete Pod {meta['name']} in StatefulSet {sts['metadata']['name']} successful",
            component=COMPONENT,
        )

    async def _status(self, sts: dict, revision: str) -> None:
        pods = [p for p in self.pods.owned_by(sts["metadata"]["uid"]) if pod_active(p)]
        ready = [p for p in pods if pod_ready(p)]
        updated = [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        old = sts.get("status") or {}
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": len(ready),
            "currentReplicas": len(updated),
            "updatedReplicas": len(updated),
            "availableReplicas": len(ready),
            "currentRevision": revision if len(updated) == len(pods) else old.get("currentRevision", revision),
            "updateRevision": revision,
            "collisionCount": 0,
        }
        await write_status(self.api, STATEFULSETS, self.statefulsets, sts, status)


def _ordinal(pod_name: str, set_name: str) -> int:
    suffix = pod_name[len(set_name) + 1 :]
    return int(suffix) if suffix.isdigit() else -1
