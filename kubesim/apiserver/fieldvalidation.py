"""Server-side field validation: the `fieldValidation` query parameter (Strict, Warn, Ignore).

As the apiserver does: unknown fields of a create, update, merge or strategic merge patch are dropped from the
object (Ignore), dropped with one `Warning: 299` header each (Warn, the default), or refuse the request with
400 BadRequest (Strict), worded as upstream:

    Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.replicass"
    strict decoding error: unknown field "spec.replicass"                                  (patches)

A server-side apply with an unknown field is always refused, as upstream:
`failed to create typed patch object (default/web; apps/v1, Kind=Deployment): .spec.replicass: field not declared
in schema`. JSON patches are not checked. Schemas: `kubesim.apiserver.schemas`.
"""

from __future__ import annotations

import functools
import json

from . import schemas
from .errors import ApiError
from .resources import ResourceType

MODES = ("Ignore", "Warn", "Strict")


def mode_of(value: str | None) -> str:
    """The validation directive of a request (Warn when absent); 400 for anything else."""
    if value in (None, ""):
        return "Warn"
    if value not in MODES:
        raise ApiError.bad_request(f'fieldValidation parameter "{value}" is invalid: supported values are: '
                                   '"Ignore", "Strict" or "Warn"')
    return value


@functools.lru_cache(maxsize=256)
def _crd_tree(crd_json: str, version: str) -> schemas.Node:
    return schemas.compile_crd(schemas.crd_version_schema(json.loads(crd_json), version))


def tree_for(store, rt: ResourceType, subresource: str | None = None) -> schemas.Node | None:
    """The field tree requests for `rt` are checked against, or None when kubesim has no schema for it."""
    if subresource == "scale":
        name = schemas.definition_name("autoscaling", "v1", "Scale")
        return schemas.compile_definition(name) if name else None
    if rt.custom:
        crd = store.crd_of(rt)
        if crd is None:
            return None
        spec = crd.get("spec") or {}
        return _crd_tree(json.dumps({"spec": {"versions": spec.get("versions"),
                                              "validation": spec.get("validation")}}, sort_keys=True), rt.version)
    name = schemas.definition_name(rt.group, rt.version, rt.kind)
    return schemas.compile_definition(name) if name else None


def _key_of(item, keys: tuple[str, ...]) -> str:
    if not isinstance(item, dict) or not keys or any(k not in item for k in keys):
        return ""
    return ",".join(f"{k}={json.dumps(item[k])}" for k in keys)


def unknown_fields(node: schemas.Node, value, *, prune: bool, patch: bool = False,
                   path: str = "") -> list[tuple[str, str]]:
    """(json path, server-side apply path) of every field `node` does not declare; removed when `prune`.

    In a patch, keys of strategic merge directives (`$patch`, `$setElementOrder/...`) and null values
    (deletions) are not fields of the object."""
    out: list[tuple[str, str]] = []
    _walk(node, value, prune, patch, path, "", out)
    return out


def _walk(node: schemas.Node, value, prune: bool, patch: bool, path: str, ssa: str, out: list) -> None:
    if isinstance(value, dict):
        if node.fields is None and node.values is None:
            return
        for key in list(value):
            child = node.fields.get(key) if node.fields is not None else None
            if child is None:
                if node.values is not None:
                    child = node.values
                elif node.closed and not (patch and (key.startswith("$") or value[key] is None)):
                    out.append((f"{path}.{key}" if path else key, f"{ssa}.{key}"))
                    if prune:
                        del value[key]
                    continue
                else:
                    continue
            _walk(child, value[key], prune, patch, f"{path}.{key}" if path else key, f"{ssa}.{key}", out)
    elif isinstance(value, list) and node.items is not None:
        for i, item in enumerate(value):
            key = _key_of(item, node.list_keys)
            _walk(node.items, item, prune, patch, f"{path}[{i}]", f"{ssa}[{key or i}]", out)


def check(store, rt: ResourceType, body, directive: str | None, *, operation: str, name: str = "",
          namespace: str | None = None, subresource: str | None = None) -> list[str]:
    """Validate a request body in place; returns the Warning texts to send. `operation`: create, update,
    patch or apply. Raises 400 BadRequest for Strict (and always for apply) when fields are unknown."""
    mode = mode_of(directive)
    if not isinstance(body, dict):
        return []
    tree = tree_for(store, rt, subresource)
    if tree is None:
        return []
    found = unknown_fields(tree, body, prune=mode != "Strict" and operation != "apply",
                           patch=operation in ("patch", "apply"))
    if not found:
        return []
    if operation == "apply":
        ns = (namespace or "") if rt.namespaced else ""
        lines = [f"{ssa}: field not declared in schema" for _path, ssa in found]
        detail = lines[0] if len(lines) == 1 else "errors:\n  " + "\n  ".join(lines)
        raise ApiError.bad_request(f"failed to create typed patch object ({ns}/{name}; {rt.api_version}, "
                                   f"Kind={rt.kind}): {detail}")
    messages = [f'unknown field "{path}"' for path, _ssa in found]
    if mode == "Strict":
        error = "strict decoding error: " + ", ".join(messages)
        if operation == "patch":
            raise ApiError.bad_request(error)
        raise ApiError.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}')
    return messages if mode == "Warn" else []


def warning_header(text: str) -> str:
    """An RFC 7234 Warning header value as the apiserver writes it (code 299, agent "-")."""
    return "299 - " + json.dumps(text)
