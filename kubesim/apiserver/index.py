"""The objects of one resource, indexed so that a list scans only its candidates, not the whole kind.

A list with a namespace, a label selector with an equality (`app=web`, `a in (x)`) or a field selector
with an equality on an indexed path (`involvedObject.name=x` on Events, `spec.nodeName=n` on Pods)
starts from the smallest matching index entry; the full selector is still applied to every candidate,
so an index narrows a scan and never decides a match. With 10,000 services' objects in the store,
the reconciler's selective lists went from scanning every object of the kind to a handful.
"""

from __future__ import annotations

from .selectors import field_string

# Field paths with an index per resource (group, plural): the field selectors clients use at scale.
INDEXED_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "events"): ("involvedObject.name",),
    ("", "pods"): ("spec.nodeName",),
}

Key = tuple[str | None, str]


class IndexedBucket(dict):
    """`{(namespace, name): object}` kept with indexes by namespace, by label and by a few fields.

    Only item assignment, `pop` and `clear` change it (what the store uses); other dict mutators are
    not indexed and must not be used.
    """

    def __init__(self, fields: tuple[str, ...] = ()):
        super().__init__()
        self._fields = fields
        self._by_ns: dict[str | None, dict[Key, None]] = {}
        self._by_label: dict[tuple[str, str], dict[Key, None]] = {}
        self._by_field: dict[tuple[str, str], dict[Key, None]] = {}

    def _entries(self, obj: dict):
        meta = obj.get("metadata") or {}
        for item in (meta.get("labels") or {}).items():
            yield self._by_label, item
        for path in self._fields:
            yield self._by_field, (path, field_string(obj, path))  # "" too: `spec.nodeName=` finds unbound pods

    def _add(self, key: Key, obj: dict) -> None:
        self._by_ns.setdefault(key[0], {})[key] = None
        for index, entry in self._entries(obj):
            index.setdefault(entry, {})[key] = None

    def _drop(self, key: Key, obj: dict) -> None:
        for index, entry in ((None, None), *self._entries(obj)):
            index = self._by_ns if index is None else index
            entry = key[0] if entry is None else entry
            keys = index.get(entry)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del index[entry]

    def __setitem__(self, key: Key, obj: dict) -> None:
        old = self.get(key)
        if old is not None:
            self._drop(key, old)
        super().__setitem__(key, obj)
        self._add(key, obj)

    _MISSING = object()

    def pop(self, key, default=_MISSING):
        if key in self:
            obj = super().pop(key)
            self._drop(key, obj)
            return obj
        if default is self._MISSING:
            raise KeyError(key)
        return default

    def __delitem__(self, key) -> None:
        self.pop(key)

    def clear(self) -> None:
        super().clear()
        self._by_ns.clear()
        self._by_label.clear()
        self._by_field.clear()

    def candidates(self, namespace: str | None, labels: dict[str, str], fields: dict[str, str]):
        """Keys that may match: the smallest of the namespace's, each required label's and each indexed
        field's entries (all keys when nothing narrows)."""
        sets = []
        if namespace is not None:
            sets.append(self._by_ns.get(namespace, {}))
        sets += [self._by_label.get(item, {}) for item in labels.items()]
        sets += [self._by_field.get(item, {}) for item in fields.items() if item[0] in self._fields]
        if not sets:
            return self.keys()
        return min(sets, key=len).keys()
