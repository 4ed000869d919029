"""What a create or update of a built-in kind must carry (422 Invalid otherwise).

The official client's typed models refuse objects missing these fields, so the apiserver rejecting
them at write time keeps every stored object readable by every client. Custom objects are not validated.
"""

from __future__ import annotations

import re

from .errors import ApiError
from .resources import ResourceType

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    r"is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _get(obj, dotted: str):
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _required(field: str) -> dict:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field}


def _go_map(labels: dict) -> str:
    inner = ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items()))
    return "map[string]string{" + inner + "}"


# Keys every item of these lists must have (the official client's models refuse items without them).
ITEM_REQUIRED: dict[str, tuple[str, ...]] = {
    "ownerReferences": ("apiVersion", "kind", "name", "uid"),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("name", "mountPath"),
    "matchExpressions": ("key", "operator"),
    "metrics": ("type",),
    "taints": ("key", "effect"),
}


def _item_causes(value, path: str, causes: list[dict], container: bool = False) -> None:
    """Walk `value` and report list items missing their required keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            child = f"{path}.{k}" if path else k
            if isinstance(v, list):
                required = ITEM_REQUIRED.get(k, ())
                if k == "ports":
                    required = ("containerPort",) if container else ("port",)
                for i, item in enumerate(v):
                    if isinstance(item, dict):
                        causes.extend(_required(f"{child}[{i}].{r}") for r in required
                                      if item.get(r) in (None, ""))
                    _item_causes(item, f"{child}[{i}]", causes,
                                 container=k in ("containers", "initContainers", "ephemeralContainers"))
            elif isinstance(v, dict):
                _item_causes(v, child, causes)


def _name_problem(rt: ResourceType, name: str) -> str | None:
    """Why `name` is invalid for `rt`: RBAC objects take any path segment (`system:controller:x`, as
    upstream's ValidateRBACName), every other kind an RFC 1123 subdomain."""
    if rt.group == "rbac.authorization.k8s.io":
        if name in (".", ".."):
            return f"may not be '{name}'"
        bad = next((c for c in "/%" if c in name), None)
        return f"may not contain '{bad}'" if bad else None
    return _SUBDOMAIN_MSG if len(name) <= 253 and not _DNS1123_SUBDOMAIN.match(name) else None


def causes_for(rt: ResourceType, obj: dict) -> list[dict]:
    """Field errors of `obj` as `Status` causes (empty when valid)."""
    causes: list[dict] = []
    name = (obj.get("metadata") or {}).get("name") or ""
    problem = _name_problem(rt, name) if name else None
    if problem:
        causes.append({"reason": "FieldValueInvalid", "message": f'Invalid value: "{name}": {problem}',
                       "field": "metadata.name"})
    _item_causes({"metadata": obj.get("metadata") or {}}, "", causes)
    if rt.custom:
        return causes
    _item_causes({k: v for k, v in obj.items() if k not in ("metadata", "status")}, "", causes)
    for path in rt.required:
        value = _get(obj, path)
        if value is None or value == [] or value == "":
            causes.append(_required(path))
    for path in ("spec.containers", "spec.template.spec.containers"):
        containers = _get(obj, path)
        if isinstance(containers, list):
            for i, c in enumerate(containers):
                if not isinstance(c, dict) or not c.get("name"):
                    causes.append(_required(f"{path}[{i}].name"))
    if rt.kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        match = (_get(obj, "spec.selector.matchLabels") or {})
        labels = _get(obj, "spec.template.metadata.labels") or {}
        if _get(obj, "spec.template") is not None and any(labels.get(k) != v for k, v in match.items()):
            causes.append({"reason": "FieldValueInvalid",
                           "message": f"Invalid value: {_go_map(labels)}: `selector` does not match template "
                                      "`labels`",
                           "field": "spec.template.metadata.labels"})
    if rt.kind == "CustomResourceDefinition":
        group, plural = _get(obj, "spec.group"), _get(obj, "spec.names.plural")
        if group and plural and name != f"{plural}.{group}":
            causes.append({"reason": "FieldValueInvalid",
                           "message": f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                           "field": "metadata.name"})
    return causes


def validate(rt: ResourceType, obj: dict) -> None:
    """Raise 422 Invalid with the apiserver's message when `obj` is not acceptable."""
    causes = causes_for(rt, obj)
    if causes:
        name = (obj.get("metadata") or {}).get("name") or ""
        raise ApiError.invalid(rt.kind, rt.group_kind, name, rt.group, causes)
