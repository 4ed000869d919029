"""`/openapi/v3`: the index and one document per group/version, with the schemas of the kinds served.

Paths (with the `fieldValidation` parameter kubectl looks for) come from `discovery.openapi_v3_document`;
`components.schemas` hold the upstream schemas of the built-in kinds and everything they reference, and each
custom kind's CRD schema, so `kubectl explain deployment.spec.replicas` and `kubectl explain lws` work.
Documents are built once per set of served kinds (the registry's generation) and cached with their hash.
"""

from __future__ import annotations

import hashlib
import json

from . import discovery, schemas
from .resources import Registry

_cache: dict[tuple[int, int, str, str], tuple[bytes, str]] = {}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _build(store, group: str, version: str) -> dict | None:
    reg: Registry = store.registry
    doc = discovery.openapi_v3_document(reg, group, version)
    if doc is None:
        return None
    roots, components = [], {}
    for rt in reg.in_group_version(group, version):
        if rt.custom:
            crd = store.crd_of(rt)
            if crd is not None:
                components[schemas.crd_component_name(group, version, rt.kind)] = schemas.crd_openapi(crd, version)
                roots.append(schemas.OBJECT_META)
            continue
        name = schemas.definition_name(group, version, rt.kind)
        if name:
            roots.extend([name, name + "List"])
    scale = schemas.definition_name("autoscaling", "v1", "Scale")
    if any(rt.scale for rt in reg.in_group_version(group, version)) or (group, version) == ("autoscaling", "v1"):
        roots.append(scale)
    components.update(schemas.openapi_components(roots))
    doc["components"] = {"schemas": dict(sorted(components.items()))}
    doc["info"] = {"title": "Kubernetes", "version": f"v{schemas.SCHEMA_VERSION}"}
    return doc


def document(store, group: str, version: str) -> tuple[bytes, str] | None:
    """The serialized document of a group/version and its hash, or None when the group/version is not served."""
    key = (id(store), store.registry.generation, group, version)
    hit = _cache.get(key)
    if hit is None:
        doc = _build(store, group, version)
        if doc is None:
            return None
        body = json.dumps(doc, separators=(",", ":")).encode()
        hit = _cache[key] = (body, hashlib.sha512(body).hexdigest()[:32].upper())
        # keep only the current generation of each store: older ones are never asked for again
        for old in [k for k in _cache if k[0] == id(store) and k[1] != key[1]]:
            del _cache[old]
    return hit


def index(store) -> dict:
    """The `/openapi/v3` index: every served group/version with a URL that changes when its document does."""
    paths = {}
    for group, versions in store.registry.group_versions().items():
        for v in versions:
            built = document(store, group, v)
            if built is not None:
                paths[_gv_path(group, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(group, v)}?hash={built[1]}"}
    return {"paths": paths}
