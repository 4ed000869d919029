"""The garbage collector, as kube-controller-manager runs it: it follows ownerReferences asynchronously.

A graph builder keeps, from a watch of every resource, each object's owners and the reverse index
(owner uid -> dependents). Work items are object uids, reconciled one at a time:

- an object whose owners are all absent (or waiting for their dependents' deletion) is deleted, with
  the propagation its own finalizers ask for (Foreground when it has dependents of its own and an owner
  waits); with a live owner left it only loses the references to the absent ones;
- an owner deleted in the foreground (`deletionTimestamp` + the `foregroundDeletion` finalizer) has
  its dependents deleted, and loses the finalizer once no dependent with `blockOwnerDeletion` is left,
  which lets the API server remove it;
- an owner deleted with the `orphan` finalizer has its reference removed from every dependent, then
  loses the finalizer.

Owners are checked live (by kind, name and uid) before anything is deleted, as the upstream collector
does; every call goes through authorization as `system:serviceaccount:kube-system:generic-garbage-collector`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


@dataclass
class Node:
    """What the graph knows of one object."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    owners: tuple[str, ...] = ()
    deleting: bool = False
    finalizers: tuple[str, ...] = field(default_factory=tuple)

    def waits_for_dependents(self) -> bool:
        return self.deleting and FOREGROUND in self.finalizers


def _node_of(obj: dict) -> Node:
    meta = obj["metadata"]
    return Node(obj.get("apiVersion") or "", obj.get("kind") or "", meta.get("namespace"), meta["name"],
                tuple(r.get("uid") for r in meta.get("ownerReferences") or [] if r.get("uid")),
                bool(meta.get("deletionTimestamp")), tuple(meta.get("finalizers") or []))


class GarbageCollector(Controller):
    name = "generic-garbage-collector"
    retry_seconds = 0.2

    def __init__(self, api):
        super().__init__()
        self.api = api
        self.nodes: dict[str, Node] = {}
        self.dependents: dict[str, set[str]] = {}
        self.synced = asyncio.Event()

    # ------------------------------------------------------------------ the graph builder

    async def watch(self) -> None:
        """Build the graph from a watch of everything; list and watch again if refused (a missing binding)."""
        while True:
            self.nodes.clear()
            self.dependents.clear()
            try:
                async for event_type, obj, old in self.api.watch_all(on_synced=self._synced):
                    self.observe(event_type, obj, old)
            except ApiError as error:
                log.debug("garbage collector: watch refused: %r", error)
                await asyncio.sleep(self.retry_seconds * 5)

    def _synced(self) -> None:
        self.synced.set()
        for uid, node in self.nodes.items():  # owners that never showed up: collect what they left behind
            if any(owner not in self.nodes for owner in node.owners):
                self.enqueue(uid)

    def observe(self, event_type: str, obj: dict, old: dict | None) -> None:
        uid = obj["metadata"].get("uid")
        if not uid:
            return
        before = self.nodes.get(uid)
        if event_type == "DELETED":
            self.nodes.pop(uid, None)
            self._index(uid, before.owners if before else (), ())
            self.enqueue_many(sorted(self.dependents.get(uid, ())))
            self._wake_waiting_owners(before.owners if before else ())
            return
        node = _node_of(obj)
        self.nodes[uid] = node
        self._index(uid, before.owners if before else (), node.owners)
        if node.deleting and ORPHAN in node.finalizers:
            self.enqueue(uid)
        if node.waits_for_dependents():
            self.enqueue(uid)
            if before is None or not before.waits_for_dependents():
                self.enqueue_many(sorted(self.dependents.get(uid, ())))
        if before is not None and set(before.owners) - set(node.owners):
            self._wake_waiting_owners(set(before.owners) - set(node.owners))
        if self.synced.is_set() and any(owner not in self.nodes for owner in node.owners):
            self.enqueue(uid)

    def _index(self, uid: str, old_owners, new_owners) -> None:
        for owner in old_owners:
            deps = self.dependents.get(owner)
            if deps is not None:
                deps.discard(uid)
                if not deps:
                    del self.dependents[owner]
        for owner in new_owners:
            self.dependents.setdefault(owner, set()).add(uid)

    def _wake_waiting_owners(self, owners) -> None:
        for owner in owners:
            node = self.nodes.get(owner)
            if node is not None and node.waits_for_dependents():
                self.enqueue(owner)

    # ------------------------------------------------------------------ the collector

    async def _live(self, uid: str, node: Node) -> dict | None:
        """The object as the API server has it now, None when it is gone (or another object took its name)."""
        rt = self.api.resource_of(node.api_version, node.kind)
        if rt is None:
            return None
        obj = await self.api.get(rt, node.namespace if rt.namespaced else None, node.name)
        return obj if obj is not None and obj["metadata"].get("uid") == uid else None

    async def _owner(self, ref: dict, namespace: str | None) -> dict | None:
        owner = Node(ref.get("apiVersion") or "", ref.get("kind") or "", namespace, ref.get("name") or "")
        return await self._live(ref.get("uid"), owner)

    async def reconcile(self, uid: str) -> None:
        node = self.nodes.get(uid)
        obj = await self._live(uid, node) if node is not None else None
        if obj is None:
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            finalizers = meta.get("finalizers") or []
            if ORPHAN in finalizers:
                await self._orphan_dependents(uid, obj)
            elif FOREGROUND in finalizers:
                await self._delete_dependents(uid, obj)
            return
        await self._attempt_to_delete(uid, obj)

    async def _attempt_to_delete(self, uid: str, obj: dict) -> None:
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if not refs:
            return
        solid, absent, waiting = [], [], []
        for ref in refs:
            owner = await self._owner(ref, meta.get("namespace"))
            if owner is None:
                absent.append(ref["uid"])
            elif owner["metadata"].get("deletionTimestamp") and FOREGROUND in (owner["metadata"].get("finalizers")
                                                                                or []):
                waiting.append(ref["uid"])
            else:
                solid.append(ref["uid"])
        if solid:
            gone = set(absent) | set(waiting)
            if gone:  # a live owner remains: only the references to the others go
                await self._drop_references(obj, gone)
            return
        finalizers = meta.get("finalizers") or []
        if waiting and self.dependents.get(uid):
            policy = "Foreground"
        else:
            policy = "Orphan" if ORPHAN in finalizers else "Foreground" if FOREGROUND in finalizers else "Background"
        await self._delete(obj, policy)

    async def _delete_dependents(self, uid: str, owner: dict) -> None:
        """Foreground: delete the dependents; drop the finalizer once none blocks the owner's deletion."""
        blocking = 0
        for dep_uid in sorted(self.dependents.get(uid, ())):
            node = self.nodes.get(dep_uid)
            dep = await self._live(dep_uid, node) if node is not None else None
            if dep is None:
                continue
            refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") == uid]
            if any(r.get("blockOwnerDeletion") for r in refs):
                blocking += 1
            if not dep["metadata"].get("deletionTimestamp"):
                self.enqueue(dep_uid)
        if not blocking:
            await self._drop_finalizer(owner, FOREGROUND)

    async def _orphan_dependents(self, uid: str, owner: dict) -> None:
        """Orphan: every dependent loses its reference to the owner, then the owner loses the finalizer."""
        for dep_uid in sorted(self.dependents.get(uid, ())):
            node = self.nodes.get(dep_uid)
            dep = await self._live(dep_uid, node) if node is not None else None
            if dep is not None:
                await self._drop_references(dep, {uid})
        await self._drop_finalizer(owner, ORPHAN)

    # ------------------------------------------------------------------ writes

    def _where(self, obj: dict):
        rt = self.api.resource_of(obj["apiVersion"], obj["kind"])
        return rt, obj["metadata"].get("namespace"), obj["metadata"]["name"]

    async def _drop_references(self, obj: dict, uids: set[str]) -> None:
        uid = obj["metadata"]["uid"]

        def change(current: dict) -> None:
            if current["metadata"].get("uid") != uid:
                return
            refs = [r for r in current["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
            if refs:
                current["metadata"]["ownerReferences"] = refs
            else:
                current["metadata"].pop("ownerReferences", None)

        await self.api.mutate(*self._where(obj), change)

    async def _drop_finalizer(self, obj: dict, finalizer: str) -> None:
        uid = obj["metadata"]["uid"]

        def change(current: dict) -> None:
            if current["metadata"].get("uid") == uid:
                current["metadata"]["finalizers"] = [f for f in current["metadata"].get("finalizers") or []
                                                     if f != finalizer]

        await self.api.mutate(*self._where(obj), change)

    async def _delete(self, obj: dict, policy: str) -> None:
        rt, namespace, name = self._where(obj)
        try:
            await self.api.delete(rt, namespace, name, propagation_policy=policy,
                                  preconditions={"uid": obj["metadata"]["uid"]})
        except ApiError as error:
            if error.code not in (404, 409):  # gone already, or another object took the name
                raise

    async def run(self) -> None:
        watcher = asyncio.ensure_future(self.watch())
        try:
            await self.synced.wait()
            await super().run()
        finally:
            watcher.cancel()
