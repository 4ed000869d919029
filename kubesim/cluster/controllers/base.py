"""The controller machinery: informers (a cache of objects kept current from store watches) and
level-based controllers fed by a deduplicating work queue.

Controllers read from the informer caches and write through `ClusterApi` (kubesim/cluster/controllers/api.py),
so a reconcile never lists the whole store and doing it twice changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def key_of(obj: dict) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def controller_of(obj: dict) -> dict | None:
    """The ownerReference with `controller: true`, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def owner_ref(owner: dict, block: bool = True) -> dict:
    """A controller ownerReference pointing at `owner`."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def _rv(obj: dict) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


Handler = Callable[[str, dict, dict | None], None]  # (event type, object, previous object)


class Informer:
    """A cache of one resource kept current from the store's watch, notifying handlers of changes."""

    def __init__(self, api, resource: str):
        self.api = api
        self.resource = resource
        self.objects: dict[Key, dict] = {}
        self.by_owner: dict[str, set[Key]] = {}
        # namespace -> its keys, so that `list(namespace)` costs the namespace, not the whole cache
        self.by_namespace: dict[str, dict[Key, None]] = {}
        self.handlers: list[Handler] = []
        self._tombstones: dict[Key, int] = {}
        self.synced = asyncio.Event()

    def get(self, namespace: str, name: str) -> dict | None:
        return self.objects.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> list[dict]:
        if namespace is None:
            return list(self.objects.values())
        return [self.objects[key] for key in self.by_namespace.get(namespace or "", ())]

    def owned_by(self, uid: str) -> list[dict]:
        return [self.objects[key] for key in self.by_owner.get(uid, ()) if key in self.objects]

    def _index(self, key: Key, obj: dict | None, old: dict | None) -> None:
        for ref in ((old or {}).get("metadata") or {}).get("ownerReferences") or []:
            self.by_owner.get(ref.get("uid"), set()).discard(key)
        for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
            self.by_owner.setdefault(ref.get("uid"), set()).add(key)

    def apply(self, event_type: str, obj: dict) -> None:
        """Record a change; events older than what a component already wrote back are ignored."""
        key = key_of(obj)
        old = self.objects.get(key)
        if event_type != "DELETED":
            if old is not None and _rv(obj) < _rv(old):
                return
            if old is None and _rv(obj) <= self._tombstones.get(key, -1):
                return  # a change queued before a deletion this process already recorded
        if event_type == "DELETED":
            self._tombstones[key] = max(_rv(obj), self._tombstones.get(key, -1))
            if len(self._tombstones) > 20_000:
                self._tombstones.pop(next(iter(self._tombstones)))
            if old is None:
                return
            self.objects.pop(key, None)
            keys = self.by_namespace.get(key[0])
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self.by_namespace[key[0]]
            self._index(key, None, old)
        else:
            self.objects[key] = obj
            self.by_namespace.setdefault(key[0], {})[key] = None
            self._index(key, obj, old)
        for handler in self.handlers:
            try:
                handler(event_type, obj, old)
            except Exception:
                log.exception("informer handler for %s failed", self.resource)

    async def run(self) -> None:
        async for event_type, obj in self.api.watch(self.resource, on_synced=self.synced.set):
            self.apply(event_type, obj)


class Controller:
    """A level-based reconciler: `enqueue(key)` from informer handlers, `reconcile(key)` one at a time."""

    name = "controller"
    retry_seconds = 1.0

    def __init__(self):
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._pending: set[Hashable] = set()
        self._delayed: dict[Hashable, asyncio.TimerHandle] = {}

    def enqueue(self, key: Hashable) -> None:
        if key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def enqueue_many(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.enqueue(key)

    def enqueue_after(self, key: Hashable, seconds: float) -> None:
        """Reconcile `key` again later (time-based transitions such as minReadySeconds or back-off)."""
        if key in self._delayed:
            return
        loop = asyncio.get_running_loop()

        def fire():
            self._delayed.pop(key, None)
            self.enqueue(key)

        self._delayed[key] = loop.call_later(seconds, fire)

    async def reconcile(self, key: Hashable) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            try:
                await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.debug("%s: reconcile %s failed: %r", self.name, key, error)
                self.enqueue_after(key, self.retry_seconds)

    def idle(self) -> bool:
        return not self._pending
