"""The controller machinery: informers (a cache of objects kept current from store watches) and
level-based controllers fed by a deduplicating work queue.

Controllers read from the informer caches and write through `ClusterApi` (kubesim/cluster/controllers/api.py),
so a reconcile never lists the whole store and doing it twice changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable

from kubesim.apiserver.index import IndexedBucket

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
        # indexed by namespace and label as the store is, so that `list(namespace)` costs the namespace and
        # `select` a selector's rarest label, not the whole cache
        self.objects = IndexedBucket()
        self.by_owner: dict[str, set[Key]] = {}
        self.handlers: list[Handler] = []
        self._tombstones: dict[Key, int] = {}
        self.synced = asyncio.Event()

    def get(self, namespace: str, name: str) -> dict | None:
        return self.objects.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> list[dict]:
        if namespace is None:
            return list(self.objects.values())
        return [self.objects[key] for key in self.objects.candidates(namespace or "", {}, {})]

    def select(self, namespace: str, match_labels: dict | None) -> list[dict]:
        """The objects of `namespace` carrying every label of `match_labels` (all of them if it is empty),
        found from the rarest of those labels; callers still check the rest of their selector."""
        wanted, namespace = dict(_pairs(match_labels)), namespace or ""
        out = []
        for key in self.objects.candidates(namespace, wanted, {}):
            obj = self.objects[key]
            labels = obj["metadata"].get("labels") or {}
            if key[0] == namespace and all(labels.get(k) == v for k, v in wanted.items()):
                out.append(obj)
        return out

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
            self._index(key, None, old)
        else:
            self.objects[key] = obj
            self._index(key, obj, old)
        for handler in self.handlers:
            try:
                handler(event_type, obj, old)
            except Exception:
                log.exception("informer handler for %s failed", self.resource)

    async def run(self) -> None:
        async for event_type, obj in self.api.watch(self.resource, on_synced=self.synced.set):
            self.apply(event_type, obj)


def _pairs(labels: dict | None) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (labels or {}).items() if isinstance(v, str)]


class SelectorIndex:
    """An informer's selector-holding objects (Services, PodDisruptionBudgets) by one label of their
    matchLabels, so that finding which of them may select a pod costs the pod's labels rather than the
    namespace. Each object is filed under its rarest pair when it is indexed; one with no matchLabels is
    always a candidate. Callers still check the whole selector."""

    def __init__(self, informer: Informer, match_labels: Callable[[dict], dict | None]):
        self.informer, self.match_labels = informer, match_labels
        self.filed: dict[Key, tuple[str, str, str] | None] = {}
        self.buckets: dict[tuple[str, str, str] | str, dict[Key, None]] = {}
        self.holders: dict[tuple[str, str, str], int] = {}  # how many selectors hold each pair
        for key, obj in informer.objects.items():
            self._add(key, obj)
        informer.handlers.insert(0, self._changed)

    def _add(self, key: Key, obj: dict) -> None:
        pairs = [(key[0], k, v) for k, v in _pairs(self.match_labels(obj))]
        for pair in pairs:
            self.holders[pair] = self.holders.get(pair, 0) + 1
        place = min(pairs, key=lambda pair: self.holders[pair]) if pairs else None
        self.filed[key] = place
        self.buckets.setdefault(place if place else key[0], {})[key] = None

    def _remove(self, key: Key, obj: dict) -> None:
        if key not in self.filed:
            return
        place = self.filed.pop(key)
        bucket = self.buckets.get(place if place else key[0]) or {}
        bucket.pop(key, None)
        for k, v in _pairs(self.match_labels(obj)):
            pair = (key[0], k, v)
            self.holders[pair] -= 1
            if not self.holders[pair]:
                del self.holders[pair]

    def _changed(self, event_type: str, obj: dict, old: dict | None) -> None:
        key = key_of(obj)
        if old is not None:
            self._remove(key, old)
        if event_type != "DELETED":
            self._add(key, obj)

    def candidates(self, namespace: str, labels: dict | None) -> list[dict]:
        """The objects of `namespace` whose selector may match `labels`, each once."""
        namespace = namespace or ""
        keys = dict(self.buckets.get(namespace) or {})
        for k, v in _pairs(labels):
            keys.update(self.buckets.get((namespace, k, v)) or {})
        objects = self.informer.objects
        return [objects[key] for key in keys if key in objects]


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
