"""The Kubernetes API schemas kubesim serves and validates against, from an offline copy.

The built-in kinds' schemas come from the `kubernetes-validate` package, which ships the upstream OpenAPI
definitions per Kubernetes version as JSON Schema (`kubernetes-json-schema/v1.31.0-local/_definitions.json`);
kubesim reads the version its `/version` reports. Custom kinds use their CRD's `openAPIV3Schema`.

Two consumers: `openapi_components()` turns definitions into the OpenAPI v3 `components.schemas` the
apiserver publishes (what `kubectl explain` reads), and `compile_definition()` / `compile_crd()` build the
compact trees `kubesim.apiserver.fieldvalidation` walks to find unknown fields.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

SCHEMA_VERSION = "1.31.0"  # the Kubernetes version of /version (discovery.VERSION_INFO)
_REF = "#/$defs/"
_COMPONENT_REF = "#/components/schemas/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Scalars upstream publishes as oneOf types (OpenAPIV3OneOfTypes): kubectl explain names them by their schema.
_SCALAR_DEFINITIONS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"format": "int-or-string",
                                                        "oneOf": [{"type": "integer"}, {"type": "string"}]},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
}


@functools.cache
def definitions() -> dict[str, dict]:
    """All upstream definitions by name (`io.k8s.api.apps.v1.Deployment`), as JSON Schema."""
    base = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{SCHEMA_VERSION}-local"
    return json.loads((base / "_definitions.json").read_text())["$defs"]


@functools.cache
def _by_gvk() -> dict[tuple[str, str, str], str]:
    out = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            out.setdefault((gvk.get("group", ""), gvk["version"], gvk["kind"]), name)
    return out


def definition_name(group: str, version: str, kind: str) -> str | None:
    """The definition of a built-in kind, e.g. ("apps", "v1", "Deployment") -> io.k8s.api.apps.v1.Deployment."""
    return _by_gvk().get((group, version, kind))


# ---------------------------------------------------------------------------------------------- OpenAPI v3


def _type(node: dict) -> str | None:
    t = node.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t


def to_openapi(node: dict) -> dict:
    """One JSON Schema node as the apiserver's OpenAPI v3 writes it (refs wrapped in allOf, no null types)."""
    out: dict = {}
    for key, value in node.items():
        if key == "$ref":
            out["$ref"] = _COMPONENT_REF + value.removeprefix(_REF)
        elif key == "type":
            t = _type(node)
            if t:
                out["type"] = t
        elif key == "properties":
            out["properties"] = {name: _property(prop) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_openapi(value)
        elif key in ("oneOf", "anyOf", "allOf"):
            out[key] = [to_openapi(v) for v in value]
        else:
            out[key] = value
    return out


def _property(node: dict) -> dict:
    if "$ref" in node:
        # upstream wraps a reference that carries its own description in allOf (kubectl explain follows both)
        wrapped = {"allOf": [{"$ref": _COMPONENT_REF + node["$ref"].removeprefix(_REF)}]}
        wrapped.update({k: v for k, v in node.items() if k != "$ref"})
        return wrapped
    return to_openapi(node)


def _refs(node, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.removeprefix(_REF).removeprefix(_COMPONENT_REF))
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def openapi_components(roots: list[str]) -> dict[str, dict]:
    """OpenAPI v3 schemas of `roots` and every definition they reference, by name."""
    defs = definitions()
    out: dict[str, dict] = {}
    todo = [r for r in roots if r in defs]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        schema = defs[name]
        if name in _SCALAR_DEFINITIONS:
            out[name] = {"description": schema.get("description", ""), **_SCALAR_DEFINITIONS[name]}
            continue
        out[name] = to_openapi(schema)
        found: set[str] = set()
        _refs(schema, found)
        todo.extend(n for n in found if n not in out and n in defs)
    return out


def crd_component_name(group: str, version: str, kind: str) -> str:
    """The name the apiserver gives a custom kind's schema: the group reversed, e.g. io.x-k8s.leaderworkerset."""
    return ".".join([*reversed(group.split(".")), version, kind])


def crd_version_schema(crd: dict, version: str) -> dict | None:
    spec = crd.get("spec") or {}
    for v in spec.get("versions") or []:
        if v.get("name") == version:
            return ((v.get("schema") or {}).get("openAPIV3Schema")
                    or ((spec.get("validation") or {}).get("openAPIV3Schema")))
    return None


def crd_openapi(crd: dict, version: str) -> dict:
    """A custom kind's OpenAPI v3 schema: its CRD schema with apiVersion, kind, metadata and the GVK."""
    spec = crd.get("spec") or {}
    kind = (spec.get("names") or {}).get("kind", "")
    schema = json.loads(json.dumps(crd_version_schema(crd, version) or {"type": "object"}))
    props = schema.setdefault("properties", {})
    pod = definitions()["io.k8s.api.core.v1.Pod"]["properties"]  # the standard apiVersion/kind wording
    props["apiVersion"] = {"type": "string", "description": pod["apiVersion"]["description"]}
    props["kind"] = {"type": "string", "description": pod["kind"]["description"]}
    props["metadata"] = {"allOf": [{"$ref": _COMPONENT_REF + OBJECT_META}],
                         "description": "Standard object's metadata. More info: "
                                        "https://git.k8s.io/community/contributors/devel/sig-architecture/"
                                        "api-conventions.md#metadata"}
    schema.setdefault("type", "object")
    schema["x-kubernetes-group-version-kind"] = [{"group": spec.get("group", ""), "version": version, "kind": kind}]
    return schema


# ---------------------------------------------------------------------------------------------- field trees


@dataclass(eq=False)
class Node:
    """What an object may contain: named fields, a schema for any other key (maps), or list items.

    `fields` None means anything goes (free-form JSON, preserved unknown fields)."""

    fields: dict[str, Node] | None = None
    values: Node | None = None  # map values (additionalProperties)
    items: Node | None = None  # list items
    list_keys: tuple[str, ...] = ()  # x-kubernetes-list-map-keys of a list (server-side apply paths)
    closed: bool = False  # an object whose keys are all declared: any other key is unknown


ANY = Node()


@functools.cache
def compile_definition(name: str) -> Node:
    """The field tree of a built-in definition (cached; recursive definitions share nodes)."""
    cache: dict[str, Node] = {}
    return _compile_def(name, cache)


def _compile_def(name: str, cache: dict[str, Node]) -> Node:
    if name in cache:
        return cache[name]
    schema = definitions().get(name)
    if schema is None or name in _SCALAR_DEFINITIONS:
        return ANY
    node = Node()
    cache[name] = node
    _fill(node, schema, cache)
    return node


def _fill(node: Node, schema: dict, cache: dict[str, Node]) -> None:
    t = _type(schema)
    if "properties" in schema:
        node.closed = True
        node.fields = {k: _compile(v, cache) for k, v in schema["properties"].items()}
        if isinstance(schema.get("additionalProperties"), dict):
            node.values = _compile(schema["additionalProperties"], cache)
            node.closed = False
    elif t == "array" and isinstance(schema.get("items"), dict):
        node.items = _compile(schema["items"], cache)
        node.list_keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
    elif t == "object" and isinstance(schema.get("additionalProperties"), dict):
        node.values = _compile(schema["additionalProperties"], cache)


def _compile(schema: dict, cache: dict[str, Node]) -> Node:
    ref = schema.get("$ref")
    if ref:
        return _compile_def(ref.removeprefix(_REF), cache)
    if not ({"properties", "items", "additionalProperties"} & schema.keys()):
        return ANY
    node = Node()
    _fill(node, schema, cache)
    if node.fields is None and node.values is None and node.items is None:
        return ANY
    return node


def compile_crd(schema: dict | None) -> Node:
    """The field tree of a CRD's openAPIV3Schema, pruned as the apiserver prunes structural schemas."""
    if not schema:
        return ANY
    root = _compile_structural(schema, top=True)
    if root is ANY:
        return ANY
    root.fields = dict(root.fields or {})
    root.fields.update({"apiVersion": ANY, "kind": ANY, "metadata": compile_definition(OBJECT_META)})
    root.closed = root.values is None
    return root


def _compile_structural(schema: dict, top: bool = False) -> Node:
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-int-or-string"):
        return ANY
    t = schema.get("type")
    if t == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            return ANY
        return Node(items=_compile_structural(items), list_keys=tuple(schema.get("x-kubernetes-list-map-keys") or ()))
    if t != "object" and not top and "properties" not in schema:
        return ANY
    node = Node(fields={}, closed=True)
    if schema.get("x-kubernetes-embedded-resource"):
        node.fields.update({"apiVersion": ANY, "kind": ANY, "metadata": ANY})
    for key, prop in (schema.get("properties") or {}).items():
        node.fields[key] = _compile_structural(prop)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        node.values, node.closed = _compile_structural(extra), False
    elif extra is True:
        node.values, node.closed = ANY, False
    return node
