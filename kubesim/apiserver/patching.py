"""The three non-apply patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic
merge patch (built-in kinds only), plus the list-merge keys that strategic merge and server-side apply
share (`containers`/`env`/`volumes` by name, `ports` by port, `volumeMounts` by mountPath).
"""

from __future__ import annotations

import copy

import jsonpatch
import jsonpointer

from .errors import ApiError

# Lists merged item by item in strategic merge patch and owned per item in server-side apply.
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "imagePullSecrets": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "ports": ("containerPort", "port"),  # container ports by containerPort, service ports by port
}
# Primitive lists that strategic merge patch unions instead of replacing.
PRIMITIVE_MERGE = {"finalizers"}


def list_key(field: str, items: list) -> str | None:
    """The merge key of list `field` given some of its items, or None for an atomic list."""
    candidates = LIST_KEYS.get(field)
    if not candidates:
        return None
    dict_items = [i for i in items if isinstance(i, dict)]
    if not dict_items or len(dict_items) != len(items):
        return None
    for key in candidates:
        if all(key in i for i in dict_items if i.get("$patch") != "replace"):
            return key
    return None


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def json_patch(target: dict, ops) -> dict:
    """RFC 6902 JSON patch; a failed `test` or a bad path is a 422 as on the apiserver."""
    if not isinstance(ops, list):
        raise ApiError.bad_request("json patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(target, ops, in_place=False)
    except jsonpatch.JsonPatchTestFailed as e:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {e}",
                       {}) from e
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {e}",
                       {}) from e
    except (TypeError, KeyError, AttributeError) as e:
        raise ApiError.bad_request(f"invalid json patch: {e}") from e


def _strip_directives(value):
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items()
                if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def strategic_merge(original, patch):
    """Strategic merge patch of `original` by `patch`; returns the new value (None means delete)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return None
    result = dict(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            result[name] = [x for x in result.get(name) or [] if x not in (v or [])]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge(result.get(k), v)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        elif isinstance(v, list):
            result[k] = _merge_list(k, result.get(k), v)
        else:
            result[k] = v
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, original, patch: list) -> list:
    original = list(original) if isinstance(original, list) else []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip_directives(i) for i in patch if not (isinstance(i, dict) and i.get("$patch"))]
    key = list_key(field, patch + original)
    if key is None:
        if field in PRIMITIVE_MERGE:
            return original + [x for x in patch if x not in original]
        return _strip_directives(patch)
    result = list(original)
    for item in patch:
        idx = next((n for n, o in enumerate(result) if isinstance(o, dict) and o.get(key) == item.get(key)),
                   None)
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append(_strip_directives(item))
        else:
            result[idx] = strategic_merge(result[idx], item)
    return result
