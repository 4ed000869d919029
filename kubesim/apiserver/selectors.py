"""Label and field selectors in the apiserver's string syntax.

Label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-separated (AND).
Field selectors: `path=value`, `path==value`, `path!=value` on any dotted path (`metadata.name`,
`status.phase`, `spec.nodeName`, `involvedObject.name`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .errors import ApiError

Predicate = Callable[[dict], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")


def _split_top(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _label_requirement(req: str) -> Callable[[dict], bool]:
    for op in ("!=", "==", "="):
        if op in req and " in " not in req and "notin" not in req:
            key, value = (s.strip() for s in req.split(op, 1))
            if op == "!=":
                return lambda labels, k=key, v=value: labels.get(k) != v
            return lambda labels, k=key, v=value: labels.get(k) == v
    m = _SET_RE.match(req)
    if not m:
        raise ApiError.bad_request(f"unable to parse requirement: {req!r}")
    neg, key, op, values = m.groups()
    if op:
        vals = {v.strip() for v in values.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in vals
        return lambda labels: labels.get(key) not in vals
    if neg:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def parse_label_selector(selector: str | None) -> Predicate | None:
    """A predicate on an object's `metadata.labels`, or None when the selector is empty."""
    if not selector:
        return None
    reqs = [_label_requirement(r) for r in _split_top(selector)]

    def match(obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def field_value(obj: dict, path: str):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_string(obj: dict, path: str) -> str:
    """A field as a field selector compares it: "" when absent, "true"/"false" for booleans."""
    v = field_value(obj, path)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _field_requirement(req: str) -> Callable[[dict], bool]:
    for op in ("!=", "==", "="):
        if op in req:
            path, value = (s.strip() for s in req.split(op, 1))
            break
    else:
        raise ApiError.bad_request(f"invalid selector: '{req}'; can't understand '{req}'")

    if op == "!=":
        return lambda obj: field_string(obj, path) != value
    return lambda obj: field_string(obj, path) == value


def parse_field_selector(selector: str | None) -> Predicate | None:
    """A predicate on a whole object, or None when the selector is empty."""
    if not selector:
        return None
    reqs = [_field_requirement(r) for r in _split_top(selector)]
    return lambda obj: all(r(obj) for r in reqs)


def selector_from_label_selector(sel: dict | None) -> str:
    """`{"matchLabels":…,"matchExpressions":…}` as a selector string (what a Scale reports)."""
    if not sel:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op, key, values = e.get("operator"), e.get("key"), e.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def label_equalities(selector: str | None) -> dict[str, str]:
    """The `key=value` (`==`, single-valued `in`) requirements of a label selector, for index lookups;
    the selector's predicate still decides every match."""
    out = {}
    for req in _split_top(selector or ""):
        m = _SET_RE.match(req)
        if m and m.group(3) == "in" and not m.group(1):
            values = [v.strip() for v in m.group(4).split(",") if v.strip()]
            if len(values) == 1:
                out[m.group(2)] = values[0]
            continue
        if "!=" in req or " in " in req or "notin" in req:
            continue
        for op in ("==", "="):
            if op in req:
                key, value = (s.strip() for s in req.split(op, 1))
                out[key] = value
                break
    return out


def field_equalities(selector: str | None) -> dict[str, str]:
    """The `path=value` (`==`) requirements of a field selector, for index lookups."""
    out = {}
    for req in _split_top(selector or ""):
        if "!=" in req:
            continue
        for op in ("==", "="):
            if op in req:
                path, value = (s.strip() for s in req.split(op, 1))
                out[path] = value
                break
    return out
