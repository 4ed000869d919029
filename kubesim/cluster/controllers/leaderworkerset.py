"""The LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1): `replicas` groups of `size` pods.

Group `g` is a leader pod `<name>-<g>` and workers `<name>-<g>-<w>` (w = 1..size-1) with the LWS labels,
annotations and `LWS_*` environment the real controller sets. All members are created together and the
scheduler places a group all or nothing. With `restartPolicy: RecreateGroupOnPodRestart` (the default)
a member that restarts or disappears makes the whole group be recreated. A template change replaces
groups one at a time from the highest index while the others stay ready. Status carries replicas,
readyReplicas, updatedReplicas, conditions and `hpaPodSelector` for the scale subresource.
"""

from __future__ import annotations

import hashlib

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller, Informer, controller_of, key_of, owner_ref
from kubesim.cluster.controllers.common import (
    PODS,
    delete_pod,
    pod_active,
    pod_from_template,
    pod_ready,
    set_condition,
    template_hash,
    write_status,
)

LWS = "leaderworkerset.x-k8s.io/v1/leaderworkersets"
SERVICES = "v1/services"
COMPONENT = "lws-controller"
PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, WORKER_INDEX = PREFIX + "name", PREFIX + "group-index", PREFIX + "worker-index"
GROUP_KEY, REVISION, SIZE, LEADER = (
    PREFIX + "group-key",
    PREFIX + "template-revision-hash",
    PREFIX + "size",
    PREFIX + "leader-name",
)


def group_key(namespace: str, leader: str) -> str:
    return hashlib.sha1(f"{namespace}/{leader}".encode()).hexdigest()  # noqa: S324 - a label, not security


class LeaderWorkerSetController(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, sets: Informer, pods: Informer):
        super().__init__()
        self.api, self.recorder, self.sets, self.pods = api, recorder, sets, pods
        self._complete: set[tuple[str, int]] = set()  # groups whose members were all created
        sets.handlers.append(lambda _t, lws, _old: self.enqueue(key_of(lws)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, _type: str, pod: dict, old: dict | None) -> None:
        ref = controller_of(pod) or controller_of(old or {})
        if ref and ref.get("kind") == "LeaderWorkerSet":
            self.enqueue((pod["metadata"].get("namespace") or "", ref["name"]))

    def _template(self, lws: dict, worker: int) -> dict:
        lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
        if worker == 0 and lwt.get("leaderTemplate"):
            return lwt["leaderTemplate"]
        return lwt.get("workerTemplate") or {}

    def _member(self, lws: dict, group: int, worker: int, size: int, revision: str) -> dict:
        meta = lws["metadata"]
        namespace, name = meta.get("namespace") or "default", meta["name"]
        leader = f"{name}-{group}"
        pod_name = leader if worker == 0 else f"{leader}-{worker}"
        labels = {
            NAME: name,
            GROUP_INDEX: str(group),
            WORKER_INDEX: str(worker),
            GROUP_KEY: group_key(namespace, leader),
            REVISION: revision,
        }
        annotations = {SIZE: str(size)}
        if worker:
            annotations[LEADER] = leader
        pod = pod_from_template(lws, self._template(lws, worker), pod_name, labels, annotations)
        pod["spec"].setdefault("hostname", pod_name)
        pod["spec"].setdefault("subdomain", name)
        env = [
            {"name": "LWS_LEADER_ADDRESS", "value": f"{leader}.{name}.{namespace}"},
            {"name": "LWS_GROUP_SIZE", "value": str(size)},
            {"name": "LWS_WORKER_INDEX", "value": str(worker)},
        ]
        for container in pod["spec"].get("containers") or []:
            existing = {item.get("name") for item in container.get("env") or []}
            container["env"] = [item for item in env if item["name"] not in existing] + list(container.get("env") or [])
        return pod

    async def reconcile(self, key) -> None:
        lws = self.sets.get(*key)
        if lws is None or lws["metadata"].get("deletionTimestamp"):
            return
        spec = lws.get("spec") or {}
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size", 1))
        replicas = int(spec.get("replicas", 1))
        restart = lwt.get("restartPolicy", "RecreateGroupOnPodRestart")
        revision = template_hash(
            {"leader": lwt.get("leaderTemplate"), "worker": lwt.get("workerTemplate"), "size": size}
        )
        await self._headless_service(lws)
        groups: dict[int, list[dict]] = {}
        for pod in self.pods.owned_by(lws["metadata"]["uid"]):
            if not pod_active(pod):
                continue
            try:
                groups.setdefault(int((pod["metadata"].get("labels") or {}).get(GROUP_INDEX, "-1")), []).append(pod)
            except ValueError:
                continue
        for index, members in sorted(groups.items()):
            if index >= replicas or index < 0:
                await self._delete_group(lws, members, f"scaled down to {replicas} groups")
                continue
            restarted = any(
                sum(c.get("restartCount", 0) for c in (m.get("status") or {}).get("containerStatuses") or [])
                for m in members
            )
            uid_index = (lws["metadata"]["uid"], index)
            lost = len(members) < size and uid_index in self._complete
            if restart == "RecreateGroupOnPodRestart" and (lost or restarted):
                await self._delete_group(lws, members, "a member restarted or was lost; recreating the group")
                self._complete.discard(uid_index)
                groups[index] = []
        # Create missing groups (and missing members when groups are not recreated as a whole).
        for index in range(replicas):
            members = groups.get(index) or []
            present = {int((m["metadata"].get("labels") or {}).get(WORKER_INDEX, "-1")) for m in members}
            for worker in range(size):
                if worker in present:
                    continue
                pod = self._member(lws, index, worker, size, revision)
                try:
                    self.pods.apply("ADDED", await self.api.create(PODS, pod))
                except ApiError as error:
                    if error.code == 409:
                        continue
                    await self.recorder.record(
                        lws, "FailedCreate", f"Error creating: {error.message}", "Warning", COMPONENT
                    )
                    self.enqueue_after(key, 5.0)
                    break
                present.add(worker)
            if len(present) == size:
                self._complete.add((lws["metadata"]["uid"], index))
            if not members:
                await self.recorder.record(
                    lws, "GroupsProgressing", f"Created leader and workers of group {index}", component=COMPONENT
                )
        # Rolling update: recreate the highest outdated group once every group is ready.
        live = {i: m for i, m in groups.items() if 0 <= i < replicas and m}
        outdated = [
            i for i, m in live.items() if any((p["metadata"].get("labels") or {}).get(REVISION) != revision for p in m)
        ]
        all_ready = len(live) == replicas and all(
            len(m) == size and all(pod_ready(p) for p in m) for m in live.values()
        )
        if outdated and all_ready:
            await self._delete_group(lws, live[max(outdated)], "rolling update to the new template")
        await self._status(lws, size, replicas, revision)

    async def _headless_service(self, lws: dict) -> None:
        meta = lws["metadata"]
        if await self.api.get(SERVICES, meta.get("namespace"), meta["name"]) is not None:
            return
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace") or "default",
                "ownerReferences": [owner_ref(lws)],
            },
            "spec": {"clusterIP": "None", "selector": {NAME: meta["name"]}, "publishNotReadyAddresses": True},
        }
        try:
            await self.api.create(SERVICES, service)
        except ApiError as error:
            if error.code != 409:
                raise

    async def _delete_group(self, lws: dict, members: list[dict], why: str) -> None:
        for pod in members:
            await delete_pod(self.api, self.pods, pod)
        if members:
            group = (members[0]["metadata"].get("labels") or {}).get(GROUP_INDEX)
            await self.recorder.record(lws, "RecreateGroup", f"Deleted group {group}: {why}", component=COMPONENT)

    async def _status(self, lws: dict, size: int, replicas: int, revision: str) -> None:
        groups: dict[str, list[dict]] = {}
        for pod in self.pods.owned_by(lws["metadata"]["uid"]):
            if pod_active(pod):
                groups.setdefault((pod["metadata"].get("labels") or {}).get(GROUP_INDEX, ""), []).append(pod)
        ready = sum(1 for m in groups.values() if len(m) == size and all(pod_ready(p) for p in m))
        updated = sum(
            1 for m in groups.values() if all((p["metadata"].get("labels") or {}).get(REVISION) == revision for p in m)
        )
        old = lws.get("status") or {}
        conditions = old.get("conditions") or []
        if ready >= replicas:
            conditions = set_condition(conditions, "Available", "True", "AllGroupsReady", "All replicas are ready")
            conditions = set_condition(conditions, "Progressing", "False", "Ready", "Replicas are ready")
        else:
            conditions = set_condition(conditions, "Available", "False", "AllGroupsReady", "Not all replicas are ready")
            conditions = set_condition(
                conditions, "Progressing", "True", "GroupsProgressing", "Replicas are progressing"
            )
        name = lws["metadata"]["name"]
        status = {
            "replicas": len(groups),
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "conditions": conditions,
            "hpaPodSelector": f"{NAME}={name},{WORKER_INDEX}=0",
        }
        await write_status(self.api, LWS, self.sets, lws, status)
