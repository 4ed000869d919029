"""Watch plumbing: committed change events, per-watch subscriptions with selector transitions, and the
WatchEvent in-process watchers receive. The store owns history and fan-out and
reaches subscriptions through its public `present` and `unsubscribe` (EventSource); this module imports
no store.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple, Protocol

from .resources import ResourceType
from .selectors import parse_field_selector, parse_label_selector


class WatchEvent(NamedTuple):
    """One change delivered to an in-process watcher: ADDED, MODIFIED, DELETED (or BOOKMARK)."""

    type: str
    object: dict


class _Event:
    """A committed change as kept in history and fanned out to subscriptions."""

    __slots__ = ("gp", "namespace", "obj", "old", "rv", "type", "wire")

    def __init__(self, rv: int, gp: tuple[str, str], namespace: str | None, type_: str, obj: dict,
                 old: dict | None):
        self.rv, self.gp, self.namespace, self.type, self.obj, self.old = rv, gp, namespace, type_, obj, old
        self.wire: dict[str, bytes] = {}  # serialized line per (type, apiVersion), shared by HTTP watchers


class EventSource(Protocol):
    """What a subscription needs of the store that feeds it (the store's public interface)."""

    def present(self, rt: ResourceType, obj: dict) -> dict:
        """A stored object as callers receive it."""
        ...

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop delivering events to `sub`."""
        ...


class Subscription:
    """A watch on one resource: an async iterator of WatchEvent (in-process) or raw events (HTTP)."""

    def __init__(self, store: EventSource, rt: ResourceType, namespace: str | None, label_selector: str | None,
                 field_selector: str | None):
        self.store = store
        self.rt = rt
        self.gp = (rt.group, rt.plural)
        self.namespace = namespace
        self._labels = parse_label_selector(label_selector)
        self._fields = parse_field_selector(field_selector)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        if self._labels and not self._labels(obj):
            return False
        return not (self._fields and not self._fields(obj))

    def translate(self, ev: _Event) -> str | None:
        """The event type this watcher sees: selector transitions turn MODIFIED into ADDED/DELETED."""
        now = self.matches(ev.obj)
        if ev.type == "MODIFIED":
            before = self.matches(ev.old)
            if now and before:
                return "MODIFIED"
            if now:
                return "ADDED"
            return "DELETED" if before else None
        return ev.type if now else None

    def offer(self, ev: _Event) -> None:
        if ev.gp != self.gp or self.closed:
            return
        t = self.translate(ev)
        if t is not None:
            self.queue.put_nowait((t, ev))

    def close(self) -> None:
        self.closed = True
        self.store.unsubscribe(self)

    def __aiter__(self):
        return self

    async def __anext__(self) -> WatchEvent:
        if self.closed:
            raise StopAsyncIteration
        t, ev = await self.queue.get()
        return WatchEvent(t, self.store.present(self.rt, ev.obj))
