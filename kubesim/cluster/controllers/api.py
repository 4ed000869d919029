"""How the cluster components talk to the API server's store: async wrappers over `kubesim.apiserver.store.Store`.

The store is synchronous and atomic on the server's event loop; the wrappers give controllers one
small vocabulary (resources named `"v1/pods"`, `"apps/v1/deployments"`) and one field manager per
component, and turn a watch into an async stream that reports when its initial list is delivered.

Every call is authorized as the component's own identity (kubesim/cluster/identities.py) by the API
server's access rules, so `--authorization rbac` covers the controllers, scheduler and kubelet as it
covers kubectl; with `open` (the default) the check passes everything, as for HTTP requests.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.rbac import Attributes
from kubesim.cluster.identities import component_user


def _group_and_plural(resource) -> tuple[str, str]:
    """("apps", "deployments") for "apps/v1/deployments" (or its ResourceType), ("", "pods") for "v1/pods"."""
    if not isinstance(resource, str):
        return resource.group, resource.plural
    parts = resource.split("/")
    return ("", parts[-1]) if len(parts) == 2 else (parts[0], parts[-1])


class _EveryChange:
    """A store subscriber that takes every committed change, of every resource."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()

    def offer(self, event) -> None:
        self.queue.put_nowait(event)


class ClusterApi:
    """The store as the scheduler, controllers and kubelet use it."""

    def __init__(self, store, field_manager: str = "kube-controller-manager", access=None):
        self.store = store
        self.field_manager = field_manager
        self.access = access  # the server's kubesim.apiserver.access.Access; None: nothing to enforce
        self.user = component_user(field_manager)

    def as_manager(self, field_manager: str) -> ClusterApi:
        return ClusterApi(self.store, field_manager, self.access)

    def authorize(self, verb: str, resource, namespace: str | None = None, name: str | None = "",
                  subresource: str | None = "") -> None:
        """Raise the apiserver's 403 when this component may not do `verb` on `resource`."""
        if self.access is None or self.access.mode == "open":
            return  # nothing to decide: skip building the attributes on the controllers' hot path
        group, plural = _group_and_plural(resource)
        self.access.authorize(self.user, Attributes(verb=verb, namespace=namespace or "", group=group,
                                                    resource=plural, subresource=subresource or "",
                                                    name=name or ""))

    @staticmethod
    def _where(obj: dict) -> tuple[str | None, str]:
        meta = obj.get("metadata") or {}
        return meta.get("namespace"), meta.get("name")

    async def get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        self.authorize("get", resource, namespace, name)
        try:
            return self.store.get(resource, namespace, name)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    async def list(self, resource: str, namespace: str | None = None, label_selector: str | None = None):
        self.authorize("list", resource, namespace)
        items, _rv = self.store.list(resource, namespace, label_selector)
        return items

    async def create(self, resource: str, obj: dict) -> dict:
        namespace, _name = self._where(obj)
        self.authorize("create", resource, namespace)
        return self.store.create(resource, namespace, obj, field_manager=self.field_manager)

    async def update(self, resource: str, obj: dict) -> dict:
        namespace, name = self._where(obj)
        self.authorize("update", resource, namespace, name)
        return self.store.update(resource, namespace, name, obj, field_manager=self.field_manager)

    async def update_status(self, resource: str, obj: dict) -> dict | None:
        """Write `obj["status"]` onto the current object (controllers own status: no resourceVersion race)."""
        namespace, name = self._where(obj)
        status = obj.get("status") or {}
        return await self.set_status(resource, namespace, name, lambda _old: status,
                                     uid=(obj.get("metadata") or {}).get("uid"))

    async def set_status(
        self, resource: str, namespace: str | None, name: str, compute: Callable[[dict], dict], uid: str | None = None
    ) -> dict | None:
        """Write `compute(current status)` as the status of the current object (no resourceVersion race)."""
        current = await self.get(resource, namespace, name)
        if current is None or (uid and current["metadata"].get("uid") != uid):
            return None
        status = compute(copy.deepcopy(current.get("status") or {}))
        if status == current.get("status"):
            return current
        current["status"] = status
        self.authorize("update", resource, namespace, name, "status")
        return self.store.update_status(resource, namespace, name, current, field_manager=self.field_manager)

    async def mutate(
        self, resource: str, namespace: str | None, name: str, change: Callable[[dict], None]
    ) -> dict | None:
        """Apply `change` to the current object and write it back (None when it is gone)."""
        current = await self.get(resource, namespace, name)
        if current is None:
            return None
        before = copy.deepcopy(current)
        change(current)
        if current == before:
            return current
        self.authorize("update", resource, namespace, name)
        return self.store.update(resource, namespace, name, current, field_manager=self.field_manager)

    async def delete(
        self, resource: str, namespace: str | None, name: str, propagation_policy: str | None = None,
        preconditions: dict | None = None,
    ) -> dict:
        """Delete; returns the object's last state (with the deletion's resourceVersion)."""
        self.authorize("delete", resource, namespace, name)
        gone, _removed = self.store.delete(resource, namespace, name, propagation_policy=propagation_policy,
                                           preconditions=preconditions)
        return gone

    def resource_types(self, namespaced: bool | None = None) -> list:
        """The served resource types, one per (group, plural) (discovery, as the namespace controller reads it)."""
        seen, out = set(), []
        for rt in self.store.registry.all():
            if (rt.group, rt.plural) not in seen and (namespaced is None or rt.namespaced == namespaced):
                seen.add((rt.group, rt.plural))
                out.append(rt)
        return out

    def resource_of(self, api_version: str, kind: str):
        """The served resource type of `kind` in `api_version` (an ownerReference's), None when not served."""
        return self.store.registry.by_kind(api_version, kind)

    async def finalize_namespace(self, name: str, finalizers: list[str]) -> dict:
        """PUT namespaces/{name}/finalize: the namespace controller's last word on an emptied namespace."""
        self.authorize("update", "v1/namespaces", None, name, "finalize")
        return self.store.finalize_namespace(name, finalizers)

    async def watch_all(self, on_synced: Callable[[], None] | None = None) -> AsyncIterator:
        """(type, object, previous) for every object of every resource, then every change (the garbage
        collector's graph builder); calls `on_synced` once the current objects are delivered."""
        self.authorize("list", "*")
        self.authorize("watch", "*")
        sub = _EveryChange()
        self.store.subscribe_raw(sub)  # before listing, in the same step: nothing falls between the two
        current = [item for rt in self.resource_types() for item in self.store.list(rt)[0]]
        try:
            for obj in current:
                yield "ADDED", obj, None
            if on_synced is not None:
                on_synced()
            while True:
                event = await sub.queue.get()
                yield event.type, event.obj, event.old
        finally:
            self.store.unsubscribe(sub)

    async def watch(self, resource: str, on_synced: Callable[[], None] | None = None) -> AsyncIterator:
        """(type, object) for every current object, then every change; calls `on_synced` in between."""
        self.authorize("list", resource)
        self.authorize("watch", resource)
        sub = self.store.watch(resource)
        initial = sub.queue.qsize()
        try:
            if initial == 0 and on_synced is not None:
                on_synced()
            delivered = 0
            async for event in sub:
                yield event.type, event.object
                delivered += 1
                if delivered == initial and on_synced is not None:
                    on_synced()
        finally:
            sub.close()

    async def settle(self) -> None:
        """Let queued watch events reach their informers."""
        await asyncio.sleep(0)
