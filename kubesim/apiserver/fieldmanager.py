"""Field ownership for server-side apply: `metadata.managedFields`, apply conflicts, force and removal.

A field set is a set of paths; a path is a tuple of elements in the FieldsV1 spelling: `f:<field>` for
a map key, `k:{"name":"c"}` for an item of an associative list (keys from `patching.LIST_KEYS`) and `.`
for "the item itself". Lists without a merge key are atomic (one leaf). Every write goes through
`FieldManager.apply` (Apply operations) or `FieldManager.update` (everything else), which returns the
new managedFields list.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

from .errors import ApiError
from .patching import list_key

Path = tuple[str, ...]
# Lists of scalars whose values are owned one by one (`listType: set`), e.g. `v:"example.com/x"`.
SET_LISTS = {"finalizers"}

# metadata fields the server owns; they never appear in a field set.
SERVER_METADATA = {
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
    "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generateName",
}


def _key_elem(key: str, value) -> str:
    return "k:" + json.dumps({key: value}, separators=(",", ":"))


def _walk(name: str, value, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _walk(k, v, (*path, "f:" + k), out)
        return
    if isinstance(value, list) and value:
        key = list_key(name, value)
        if key is not None:
            for item in value:
                ip = (*path, _key_elem(key, item[key]))
                out.add((*ip, "."))
                for k, v in item.items():
                    _walk(k, v, (*ip, "f:" + k), out)
            return
        if name in SET_LISTS and all(not isinstance(i, (dict, list)) for i in value):
            for item in value:
                out.add((*path, _value_elem(item)))
            return
    out.add(path)


def _value_elem(value) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"))


def fieldset(obj: dict, *, status: bool | None = None) -> set[Path]:
    """The paths set in `obj`. status=False leaves `.status` out, status=True keeps only `.status`."""
    out: set[Path] = set()
    for k, v in obj.items():
        if k in ("apiVersion", "kind"):
            continue
        if status is False and k == "status":
            continue
        if status is True and k != "status":
            continue
        if k == "metadata" and isinstance(v, dict):
            meta = {mk: mv for mk, mv in v.items() if mk not in SERVER_METADATA}
            if meta:
                _walk(k, meta, ("f:metadata",), out)
            continue
        _walk(k, v, ("f:" + k,), out)
    return out


def to_fields_v1(paths: set[Path]) -> dict:
    tree: dict = {}
    for p in sorted(paths):
        node = tree
        for elem in p:
            node = node.setdefault(elem, {})
    return tree


def from_fields_v1(tree: dict, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for k, v in (tree or {}).items():
        p = (*prefix, k)
        if v:
            out |= from_fields_v1(v, p)
        else:
            out.add(p)
    return out


_MISSING = object()


@functools.lru_cache(maxsize=4096)
def _parse_key(elem: str) -> tuple[str, object]:
    """`k:{"name":"c"}` -> ("name", "c"), cached: the same keys recur on every write."""
    (k, v), = json.loads(elem[2:]).items()
    return k, v


def value_at(obj, path: Path):
    """The value at `path` in `obj`, or `_MISSING`."""
    cur = obj
    for elem in path:
        if elem == ".":
            return cur
        if elem.startswith("f:"):
            if not isinstance(cur, dict) or elem[2:] not in cur:
                return _MISSING
            cur = cur[elem[2:]]
        elif elem.startswith("v:"):
            value = json.loads(elem[2:])
            return value if isinstance(cur, list) and value in cur else _MISSING
        else:
            k, v = _parse_key(elem)
            if not isinstance(cur, list):
                return _MISSING
            cur = next((i for i in cur if isinstance(i, dict) and i.get(k) == v), _MISSING)
            if cur is _MISSING:
                return _MISSING
    return cur


def remove_at(obj: dict, path: Path) -> None:
    """Remove the field (or, for a `.` path, the list item) at `path` in place."""
    if path and path[-1] == ".":
        path = path[:-1]
    parent = value_at(obj, path[:-1])
    last = path[-1]
    if last.startswith("f:"):
        if isinstance(parent, dict):
            parent.pop(last[2:], None)
    elif isinstance(parent, list) and last.startswith("v:"):
        value = json.loads(last[2:])
        parent[:] = [i for i in parent if i != value]
    elif isinstance(parent, list):
        k, v = _parse_key(last)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and i.get(k) == v)]


def path_string(path: Path) -> str:
    """`.spec.template.spec.containers[name="c"].image`, as the apiserver prints field paths."""
    out = ""
    for elem in path:
        if elem == ".":
            continue
        if elem.startswith("f:"):
            out += "." + elem[2:]
        elif elem.startswith("v:"):
            out += f"[={elem[2:]}]"
        else:
            k, v = _parse_key(elem)
            out += f"[{k}={json.dumps(v)}]"
    return out


def apply_merge(live, config, name: str = ""):
    """Merge an apply configuration into the live object: maps recurse, keyed lists merge by key."""
    if isinstance(config, dict) and isinstance(live, dict):
        out = dict(live)
        for k, v in config.items():
            out[k] = apply_merge(live.get(k), v, k)
        return out
    if isinstance(config, list) and isinstance(live, list):
        key = list_key(name, config + live)
        if key is not None:
            by_key = {i[key]: i for i in config}
            live_keys = {i[key] for i in live}
            merged = [apply_merge(i, by_key[i[key]], name) if i[key] in by_key else i for i in live]
            return merged + [i for i in config if i[key] not in live_keys]
        if name in SET_LISTS:
            return live + [i for i in config if i not in live]
    return config


def strip_nulls(value):
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


@dataclass
class Entry:
    """One managedFields entry with its field set decoded."""

    manager: str
    operation: str
    api_version: str
    subresource: str = ""
    time: str = ""
    fields: set[Path] = field(default_factory=set)

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def describe(self) -> str:
        who = json.dumps(self.manager)
        if self.subresource:
            who += f" with subresource {json.dumps(self.subresource)}"
        return f"{who} using {self.api_version}"

    def to_json(self) -> dict:
        out = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version,
               "time": self.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(self.fields)}
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def decode(managed: list | None) -> list[Entry]:
    out = []
    for m in managed or []:
        if not isinstance(m, dict) or (not m.get("manager") and not m.get("operation")):
            continue
        out.append(Entry(m.get("manager", ""), m.get("operation", "Update"), m.get("apiVersion", ""),
                         m.get("subresource", ""), m.get("time", ""), from_fields_v1(m.get("fieldsV1") or {})))
    return out


def encode(entries: list[Entry]) -> list[dict]:
    return [e.to_json() for e in entries if e.fields]


def _owned_elsewhere(entries: list[Entry], me: Entry, path: Path) -> bool:
    """Does any other manager own `path` or something below it?"""
    n = len(path) - 1 if path[-1] == "." else len(path)
    prefix = path[:n]
    for e in entries:
        if e is me:
            continue
        for p in e.fields:
            if p[:n] == prefix:
                return True
    return False


class FieldManager:
    """Computes apply results and managedFields for one write (`now` is the write's timestamp)."""

    def __init__(self, api_version: str, now: str):
        self.api_version = api_version
        self.now = now

    def _entry(self, entries: list[Entry], manager: str, operation: str, subresource: str) -> Entry:
        for e in entries:
            if e.identity == (manager, operation, subresource):
                return e
        e = Entry(manager, operation, self.api_version, subresource, self.now)
        entries.append(e)
        return e

    def apply(self, live: dict, config: dict, managed: list | None, manager: str, *, force: bool,
              subresource: str = "", status: bool | None = None) -> tuple[dict, list[dict]]:
        """Server-side apply of `config` onto `live` (deep-copied by the caller): new object, managedFields.

        Raises a 409 Conflict listing every field another manager owns with a different value, unless
        `force`, which moves those fields to `manager`.
        """
        entries = decode(managed)
        me = self._entry(entries, manager, "Apply", subresource)
        previous = set(me.fields)
        wanted = fieldset(config, status=status)
        conflicts: list[tuple[Entry, Path]] = []
        for e in entries:
            if e is me:
                continue
            for p in sorted(wanted & e.fields):
                if p[-1] == ".":
                    continue
                if value_at(live, p) != value_at(config, p):
                    conflicts.append((e, p))
        if conflicts and not force:
            raise _conflict_error(conflicts)
        for e, p in conflicts:
            e.fields.discard(p)
        new = apply_merge(live, config)
        me.fields = wanted
        # whole list items first (outermost first), so their key fields are still there to find them by
        dropped = previous - wanted
        items = sorted((p for p in dropped if p[-1] == "."), key=len)
        leaves = sorted((p for p in dropped if p[-1] != "."), key=len, reverse=True)
        for p in items + leaves:
            if not _owned_elsewhere(entries, me, p):
                remove_at(new, p)
        me.time = self.now
        me.api_version = self.api_version
        self._prune(entries, new)
        return new, encode(entries)

    def update(self, old: dict, new: dict, managed: list | None, manager: str, *, subresource: str = "",
               status: bool | None = None) -> list[dict]:
        """managedFields after a non-apply write by `manager`: it takes every field it changed."""
        entries = decode(managed)
        old_fields = fieldset(old, status=status) if old else set()
        new_fields = fieldset(new, status=status)
        changed = {p for p in new_fields if value_at(old, p) != value_at(new, p)} if old else new_fields
        removed = old_fields - new_fields
        if changed or removed:
            for e in entries:
                e.fields -= changed
                e.fields -= removed
            if changed:
                me = self._entry(entries, manager, "Update", subresource)
                me.fields |= changed
                me.time = self.now
                me.api_version = self.api_version
        self._prune(entries, new)
        return encode(entries)

    @staticmethod
    def _prune(entries: list[Entry], obj: dict) -> None:
        for e in entries:
            e.fields = {p for p in e.fields if value_at(obj, p) is not _MISSING}


def _conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {e.describe()}",
               "field": path_string(p)} for e, p in conflicts]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {path_string(p)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for e, p in conflicts:
            by_manager.setdefault(e.describe(), []).append(path_string(p))
        lines = []
        for who in sorted(by_manager):
            lines.append(f"conflicts with {who}:")
            lines.extend(f"- {p}" for p in by_manager[who])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})
