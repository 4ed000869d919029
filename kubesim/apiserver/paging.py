"""List paging: `limit` and `continue`, as the apiserver serves them from etcd.

A page ends with a continue token that, like the apiserver's, is base64 of
`{"v":"meta.k8s.io/v1","rv":<list resourceVersion>,"start":"<namespace>/<name>\\u0000"}`. Later pages are
served from the same snapshot as the first: the store's current objects with every change made after that
resourceVersion rolled back from the watch history. Once that history is gone (compacted), the token is
refused with 410 Expired in the apiserver's words, and the Status carries a token that continues from the
current state instead (an inconsistent list, as the message says).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from .errors import ApiError
from .resources import ResourceType
from .watch import Subscription

TOKEN_VERSION = "meta.k8s.io/v1"
# rv -1 in a token means "continue from the current state" (what the 410 answer hands out).
LATEST = -1
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of "
    "the results. Continuing with the provided token results in an inconsistent list - objects that were "
    "created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


@dataclass
class Page:
    """One page of a list: its items, the resourceVersion of the snapshot and what follows."""

    items: list[dict]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None  # remainingItemCount (only when no selector, as upstream)

    def list_meta(self) -> dict:
        meta: dict = {"resourceVersion": self.resource_version}
        if self.continue_token:
            meta["continue"] = self.continue_token
        if self.remaining is not None:
            meta["remainingItemCount"] = self.remaining
        return meta


def encode_token(rv: int, start: tuple[str | None, str]) -> str:
    key = f"{start[0]}/{start[1]}" if start[0] else start[1]
    raw = json.dumps({"v": TOKEN_VERSION, "rv": rv, "start": key + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str) -> tuple[int, tuple[str, str]]:
    """(resourceVersion, last key served) of a continue token; 400 BadRequest when it is not one."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if raw.get("v") != TOKEN_VERSION:
            raise ValueError("unsupported version")
        rv, start = int(raw["rv"]), str(raw["start"]).rstrip("\x00")
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        raise ApiError.bad_request("continue key is not valid: invalid continue token") from None
    ns, _, name = start.rpartition("/")
    return rv, (ns, name)


def parse_limit(value: str | None) -> int:
    if value in (None, ""):
        return 0
    try:
        limit = int(value)
    except ValueError:
        raise ApiError.bad_request(f'invalid value for limit: "{value}"') from None
    return max(limit, 0)


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def snapshot(store, rt: ResourceType, namespace: str | None, label_selector: str | None,
             field_selector: str | None, rv: int) -> list[dict]:
    """The matching objects as they were at resourceVersion `rv`, sorted by namespace/name.

    Current objects with the changes made after `rv` undone from history; 410 Expired once it is gone."""
    items, _ = store.list(rt, namespace, label_selector, field_selector)
    if rv >= store.resource_version:
        return items
    sub = Subscription(store, rt, namespace if rt.namespaced else None, label_selector, field_selector)
    try:
        changes = store.initial_events(sub, str(rv), False)
    except ApiError as error:
        if error.code != 410:
            raise
        raise expired(None) from None
    # Walking back from the newest change, the last state seen for a key is its state at `rv`.
    before: dict[tuple[str, str], dict | None] = {}
    for _type, ev in reversed(changes):
        before[_key(ev.obj)] = store.present(rt, ev.old) if sub.matches(ev.old) else None
    by_key = {_key(obj): obj for obj in items}
    for key, obj in before.items():
        if obj is None:
            by_key.pop(key, None)
        else:
            by_key[key] = obj
    return [by_key[k] for k in sorted(by_key)]


class ExpiredContinue(ApiError):
    """410 Expired for a continue token whose snapshot is gone; the Status carries a token from now on."""

    def __init__(self, token: str | None):
        super().__init__(410, "Expired", EXPIRED_MESSAGE)
        self.token = token

    def status(self) -> dict:
        body = super().status()
        if self.token:
            body["metadata"] = {"continue": self.token}
        return body


def expired(last: tuple[str, str] | None) -> ApiError:
    return ExpiredContinue(encode_token(LATEST, last) if last is not None else None)


def page(store, rt: ResourceType, namespace: str | None, label_selector: str | None, field_selector: str | None,
         limit: int, token: str | None) -> Page:
    """One page of a list request (all of it without `limit`)."""
    if token:
        rv, last = decode_token(token)
        if rv == LATEST:
            items, list_rv = store.list(rt, namespace, label_selector, field_selector)
            rv = int(list_rv)
        else:
            try:
                items = snapshot(store, rt, namespace, label_selector, field_selector, rv)
            except ApiError as error:
                if error.code == 410:
                    raise expired(last) from None
                raise
        items = [obj for obj in items if _key(obj) > last]
    else:
        items, list_rv = store.list(rt, namespace, label_selector, field_selector)
        rv = int(list_rv)
    if not limit or len(items) <= limit:
        return Page(items, str(rv))
    chunk = items[:limit]
    remaining = None if (label_selector or field_selector) else len(items) - limit
    return Page(chunk, str(rv), encode_token(rv, _key(chunk[-1])), remaining)
