"""PATCH for the store: merge, JSON and strategic merge patches, and server-side apply (creates when absent).

A mixin of `kubesim.apiserver.store.Store`: it relies on the store's write path (`_prepare`, `_write`,
`_create`) and lookups, exactly as the HTTP PATCH verb does.
"""

from __future__ import annotations

from .errors import ApiError
from .fieldmanager import FieldManager, strip_nulls
from .objects import _status_scope, clone, now_rfc3339
from .patching import json_patch, merge_patch, strategic_merge
from .resources import ResourceType

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}


class PatchMixin:
    """`Store.patch` and server-side apply."""

    def patch(self, resource, namespace: str | None, name: str, patch, patch_type: str = "merge", *,
              field_manager: str | None = None, force: bool = False, subresource: str | None = None,
              dry_run: bool = False) -> dict:
        """PATCH with "merge", "json", "strategic" or "apply" (server-side apply; creates when absent)."""
        rt = self.resource(resource)
        patch_type = PATCH_TYPES.get(patch_type, patch_type)
        if patch_type not in ("merge", "json", "strategic", "apply"):
            raise ApiError.unsupported_media_type(patch_type)
        if patch_type == "strategic" and rt.custom:
            raise ApiError.unsupported_media_type(patch_type)
        if patch_type == "apply":
            if not field_manager:
                raise ApiError.bad_request("fieldManager is required for apply requests")
            return self._apply(rt, namespace, name, patch, field_manager, force, subresource, dry_run)
        old = self._current(rt, namespace, name)
        manager = field_manager or "kubesim"
        if subresource == "scale":
            scale = self._scale_of(rt, old)
            patched = self._patch_doc(scale, patch, patch_type)
            if (patched.get("metadata") or {}).get("resourceVersion") not in (None, scale["metadata"]
                                                                               ["resourceVersion"]):
                raise ApiError.conflict(rt.group_resource, name, rt.group, rt.plural)
            return self._write_scale(rt, old, patched, manager, dry_run)
        patched = self._patch_doc(old, patch, patch_type)
        if not isinstance(patched, dict):
            raise ApiError.bad_request("the patch produced something that is not an object")
        if (patched.get("metadata") or {}).get("resourceVersion") != old["metadata"]["resourceVersion"] and \
                (patched.get("metadata") or {}).get("resourceVersion") is not None:
            raise ApiError.conflict(rt.group_resource, name, rt.group, rt.plural)
        new = self._prepare(rt, old, patched, subresource)
        return self.present(rt, self._write(rt, old, new, manager, subresource, dry_run))

    @staticmethod
    def _patch_doc(doc: dict, patch, patch_type: str):
        if patch_type == "json":
            return json_patch(clone(doc), patch)
        if not isinstance(patch, dict):
            raise ApiError.bad_request("the patch must be a JSON object")
        if patch_type == "merge":
            return merge_patch(clone(doc), patch)
        return strategic_merge(clone(doc), patch)

    def _apply(self, rt: ResourceType, namespace, name: str, config, manager: str, force: bool,
               subresource: str | None, dry_run: bool) -> dict:
        if not isinstance(config, dict):
            raise ApiError.bad_request("the apply configuration must be an object")
        config = strip_nulls(config)
        cmeta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
        if (config.get("kind") and config.get("kind") != rt.kind) or \
                (config.get("apiVersion") and config.get("apiVersion") != rt.api_version):
            raise ApiError.bad_request(
                f"the API version in the data ({config.get('apiVersion')}) does not match the expected API "
                f"version ({rt.api_version})" if config.get("apiVersion") != rt.api_version else
                f"the kind in the data ({config.get('kind')}) does not match the expected kind ({rt.kind})")
        if cmeta.get("name") and cmeta["name"] != name:
            raise ApiError.bad_request(
                f"the name of the object ({cmeta['name']}) does not match the name on the URL ({name})")
        ns = self._ns(rt, namespace)
        old = self._bucket(rt).get((ns, name))
        if cmeta.get("resourceVersion") and (old is None or cmeta["resourceVersion"] !=
                                             old["metadata"]["resourceVersion"]):
            if old is None:
                raise ApiError.not_found(rt.group_resource, name, rt.group, rt.plural)
            raise ApiError.conflict(rt.group_resource, name, rt.group, rt.plural)
        config = clone(config)
        config["apiVersion"], config["kind"] = rt.api_version, rt.kind
        cfg_meta = config.setdefault("metadata", {})
        cfg_meta["name"] = name
        if rt.namespaced:
            cfg_meta["namespace"] = ns
        for k in ("resourceVersion", "uid", "managedFields", "creationTimestamp", "generation"):
            cfg_meta.pop(k, None)
        status_scope = _status_scope(rt, subresource)
        if status_scope is False:
            config.pop("status", None)
        elif status_scope is True:
            config = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {"name": name},
                      "status": config.get("status") or {}}
        fm = FieldManager(rt.api_version, now_rfc3339())
        if old is None:
            if subresource:
                raise ApiError.not_found(rt.group_resource, name, rt.group, rt.plural)
            skeleton = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {}}
            new, managed = fm.apply(skeleton, config, None, manager, force=force, status=status_scope)
            return self._create(rt, ns, new, manager, dry_run, managed=managed)
        live = clone(old)
        new, managed = fm.apply(live, config, old["metadata"].get("managedFields"), manager, force=force,
                                subresource=subresource or "", status=status_scope)
        new = self._prepare(rt, old, new, subresource) if subresource != "status" else new
        if subresource == "status":
            new["metadata"] = clone(old["metadata"])
        return self.present(rt, self._write(rt, old, new, manager, subresource, dry_run, managed=managed))
