"""Small helpers on stored objects shared by the store modules: copies, timestamps, comparisons, defaults."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

from .resources import ResourceType
from .selectors import field_value


def clone(value):
    """A deep copy of a JSON-like value (pickle round trip: several times faster than copy.deepcopy)."""
    return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))  # noqa: S301 - our own bytes


def pod_active(pod: dict) -> bool:
    """Counted by quota and controllers: not terminating and not finished."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_spec_defaults(spec) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                for port in c.get("ports") or []:
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")


def apply_spec_defaults(rt: ResourceType, obj: dict) -> None:
    """The apiserver's defaulting that clients visibly rely on, applied on every write like the real one."""
    meta = obj.get("metadata")
    if rt.key == ("", "v1", "namespaces") and isinstance(meta, dict) and meta.get("name"):
        # Set on every namespace since Kubernetes 1.22, so NetworkPolicies can select a namespace by name.
        meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
    spec = obj.get("spec")
    if not isinstance(spec, dict) or rt.custom:
        return
    if rt.group == "apps":
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if rt.kind == "Deployment":
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        template = spec.get("template")
        if isinstance(template, dict):
            _pod_spec_defaults(template.get("spec"))
    elif rt.key == ("", "v1", "pods"):
        _pod_spec_defaults(spec)


def _spec_of(obj: dict, status_subresource: bool = True) -> dict:
    """What `generation` counts: everything but metadata (and status, when it has its own subresource)."""
    skip = ("metadata", "status", "apiVersion", "kind") if status_subresource else ("metadata", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


def _without_times(obj: dict) -> dict:
    meta = dict(obj.get("metadata") or {})
    if meta.get("managedFields"):
        meta["managedFields"] = [{k: v for k, v in m.items() if k != "time"} for m in meta["managedFields"]]
    meta.pop("resourceVersion", None)
    return {**obj, "metadata": meta}


def _status_scope(rt: ResourceType, subresource: str | None) -> bool | None:
    """Which part of the object a write's field set covers (see fieldmanager.fieldset)."""
    if subresource == "status":
        return True
    if rt.status:
        return False
    return None


def _dotted(obj: dict, path: str | None):
    return field_value(obj, path.lstrip(".")) if path else None


def _set_dotted(obj: dict, path: str, value) -> None:
    parts = path.lstrip(".").split(".")
    cur = obj
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
