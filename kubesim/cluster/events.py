"""Kubernetes Events as the cluster components emit them (scheduler, kubelet, controllers).

Repeats of the same reason and message on the same object are folded into one Event whose `count`
and `lastTimestamp` grow, as client-go's event correlator does.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime


def now() -> str:
    """The current time as RFC 3339 UTC with whole seconds, as Kubernetes writes timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """The current time with microseconds (MicroTime fields such as `eventTime`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(stamp) -> datetime | None:
    """An RFC 3339 timestamp ("...Z" or "...+00:00") as an aware datetime; None when absent or malformed."""
    if not isinstance(stamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def involved(obj: dict, field_path: str | None = None) -> dict:
    """An ObjectReference to `obj` for `involvedObject`."""
    meta = obj.get("metadata") or {}
    ref = {
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "apiVersion": obj.get("apiVersion"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    if field_path:
        ref["fieldPath"] = field_path
    return {k: v for k, v in ref.items() if v is not None}


class EventRecorder:
    """Writes Events through the cluster API, folding repeats into a count."""

    def __init__(self, api):
        self.api = api
        self._seen: dict[tuple, tuple[str, str, int]] = {}  # key -> (namespace, name, count)

    async def record(
        self,
        obj: dict,
        reason: str,
        message: str,
        event_type: str = "Normal",
        component: str = "kubesim",
        host: str | None = None,
        field_path: str | None = None,
    ) -> None:
        """Emit (or bump) an event about `obj`; failures to record are never fatal."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid"), reason, message, field_path)
        stamp = now()
        previous = self._seen.get(key)
        if previous is not None:
            ev_namespace, ev_name, count = previous
            event = await self.api.get("v1/events", ev_namespace, ev_name)
            if event is not None:
                event["count"] = count + 1
                event["lastTimestamp"] = stamp
                try:
                    await self.api.update("v1/events", event)
                    self._seen[key] = (ev_namespace, ev_name, count + 1)
                    return
                except Exception:  # noqa: S110 - an event lost is not worth failing a sync over
                    pass
        name = f"{meta.get('name')}.{uuid.uuid4().hex[:16]}"
        source = {"component": component}
        if host:
            source["host"] = host
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved(obj, field_path),
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": source,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": None,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": host or component,
        }
        try:
            await self.api.create("v1/events", event)
        except Exception:
            return
        self._seen[key] = (namespace, name, 1)
        if len(self._seen) > 50_000:
            self._seen.pop(next(iter(self._seen)))


async def expire_events(api, ttl_seconds: float) -> int:
    """Delete Events last seen more than `ttl_seconds` ago (the apiserver's --event-ttl, 1 h by default)."""
    cutoff = datetime.now(UTC).timestamp() - ttl_seconds
    removed = 0
    expired = []
    # Read-only and uncopied: copying every Event of a large cluster each minute cost more than the rest.
    api.authorize("list", "v1/events")
    with api.store.raw_results():
        for event in api.store.list("v1/events")[0]:
            seen = parse_time(event.get("lastTimestamp") or event.get("firstTimestamp"))
            if seen is not None and seen.timestamp() < cutoff:
                expired.append((event["metadata"].get("namespace"), event["metadata"]["name"]))
    for namespace, name in expired:
        try:
            await api.delete("v1/events", namespace, name)
            removed += 1
        except Exception:  # noqa: S112 - already gone
            continue
    return removed
