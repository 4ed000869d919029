"""The scale subresource for the store: a Scale view of any resource with a scale mapping, and writes to it.

A mixin of `kubesim.apiserver.store.Store` (it writes through the store's `_write`).
"""

from __future__ import annotations

from .errors import ApiError
from .objects import _dotted, _set_dotted, clone
from .resources import ResourceType
from .selectors import selector_from_label_selector


class ScaleMixin:
    """`get`/`update`/`patch` with subresource="scale" go through these."""

    def _scale_of(self, rt: ResourceType, obj: dict) -> dict:
        if rt.scale is None:
            raise ApiError.path_not_found()
        meta = obj["metadata"]
        spec_replicas = _dotted(obj, rt.scale.spec_replicas)
        status_replicas = _dotted(obj, rt.scale.status_replicas)
        if rt.custom:
            selector = _dotted(obj, rt.scale.label_selector) if rt.scale.label_selector else None
        else:
            selector = selector_from_label_selector((obj.get("spec") or {}).get("selector"))
        status = {"replicas": int(status_replicas or 0)}
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": int(spec_replicas or 0)},
            "status": status,
        }

    def _write_scale(self, rt: ResourceType, old: dict, scale: dict, manager: str, dry_run: bool) -> dict:
        if rt.scale is None:
            raise ApiError.path_not_found()
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(rt.group_resource, old["metadata"]["name"], rt.group, rt.plural)
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError.invalid("Scale", "Scale.autoscaling", old["metadata"]["name"], "autoscaling", [{
                "reason": "FieldValueInvalid", "field": "spec.replicas",
                "message": f"Invalid value: {replicas}: must be greater than or equal to 0"}])
        new = clone(old)
        _set_dotted(new, rt.scale.spec_replicas, replicas)
        written = self._write(rt, old, new, manager, "scale", dry_run)
        return self._scale_of(rt, written)
