"""Discovery and OpenAPI documents built from the store's Registry.

Serves the legacy documents (`/api`, `/apis`, APIResourceLists), aggregated discovery
(`apidiscovery.k8s.io/v2`, only when asked for it by Accept header, with the exact Content-Type), the
`/openapi/v3` index plus per-group/version documents that tell `kubectl apply` the server supports
`fieldValidation`, and the minimal protobuf `/openapi/v2` document older kubectl falls back to.
"""

from __future__ import annotations

from .resources import Registry, ResourceType

VERSION_INFO = {
    "major": "1", "minor": "31", "gitVersion": "v1.31.0-kubesim", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2024-08-13T07:28:49Z", "goVersion": "go1.22.5",
    "compiler": "gc", "platform": "linux/amd64",
}
AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
# gnostic Document{swagger:"2.0", info{title:"Kubernetes", version:"v1.31.0"}, paths{}}
OPENAPI_V2_BYTES = (b"\x0a\x032.0" + b"\x12\x15" + b"\x0a\x0aKubernetes" + b"\x12\x07v1.31.0" + b"\x42\x00")
SCALE_KIND = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
SUBRESOURCE_VERBS = ["get", "patch", "update"]


def wants_aggregated(accept: str | None) -> bool:
    """True when the client asks for apidiscovery.k8s.io/v2 (kubectl ≥1.28)."""
    if not accept:
        return False
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")[1:]}
        if {"g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"} <= params:
            return True
    return False


def api_versions(host: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}


def _group_entry(group: str, versions: list[str]) -> dict:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(reg: Registry) -> dict:
    groups = [_group_entry(g, vs) for g, vs in reg.group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(reg: Registry, group: str) -> dict | None:
    vs = reg.group_versions().get(group)
    if not vs:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, vs)}


# Subresources served by routes registered beside the store (proxy.py, streaming.py, the cluster's eviction),
# listed as the real apiserver lists them so kubectl picks the same code paths (e.g. drain evicts).
EXTRA_SUBRESOURCES: dict[tuple[str, str], list[dict]] = {
    ("", "pods"): [
        {"name": "log", "kind": "Pod", "verbs": ["get"]},
        {"name": "proxy", "kind": "PodProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]},
        {"name": "eviction", "kind": "Eviction", "group": "policy", "version": "v1", "verbs": ["create"]},
        {"name": "exec", "kind": "PodExecOptions", "verbs": ["create", "get"]},
        {"name": "portforward", "kind": "PodPortForwardOptions", "verbs": ["create", "get"]},
    ],
    ("", "serviceaccounts"): [
        {"name": "token", "kind": "TokenRequest", "group": "authentication.k8s.io", "version": "v1",
         "verbs": ["create"]},
    ],
    ("", "services"): [
        {"name": "proxy", "kind": "ServiceProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]},
    ],
}


def api_resource_list(reg: Registry, group: str, version: str) -> dict | None:
    if version not in reg.group_versions().get(group, []):
        return None
    resources = []
    for rt in reg.in_group_version(group, version):
        entry = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind,
                 "verbs": rt.verbs}
        if rt.short_names:
            entry["shortNames"] = rt.short_names
        if rt.categories:
            entry["categories"] = rt.categories
        resources.append(entry)
        if rt.status:
            resources.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": SUBRESOURCE_VERBS})
        if rt.scale:
            resources.append({"name": f"{rt.plural}/scale", "singularName": "", "namespaced": rt.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": SUBRESOURCE_VERBS})
        for extra in EXTRA_SUBRESOURCES.get((rt.group, rt.plural), []):
            resources.append({**extra, "name": f"{rt.plural}/{extra['name']}", "singularName": "",
                              "namespaced": rt.namespaced})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


def _aggregated_resource(rt: ResourceType) -> dict:
    entry = {"resource": rt.plural,
             "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
             "scope": "Namespaced" if rt.namespaced else "Cluster",
             "singularResource": rt.singular, "verbs": rt.verbs}
    if rt.short_names:
        entry["shortNames"] = rt.short_names
    if rt.categories:
        entry["categories"] = rt.categories
    subs = []
    if rt.scale:
        subs.append({"subresource": "scale", "responseKind": SCALE_KIND, "verbs": SUBRESOURCE_VERBS})
    if rt.status:
        subs.append({"subresource": "status",
                     "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                     "verbs": SUBRESOURCE_VERBS})
    for extra in EXTRA_SUBRESOURCES.get((rt.group, rt.plural), []):
        subs.append({"subresource": extra["name"],
                     "responseKind": {"group": extra.get("group", ""), "version": extra.get("version", "v1"),
                                      "kind": extra["kind"]},
                     "verbs": extra["verbs"]})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(reg: Registry, core: bool) -> dict:
    """APIGroupDiscoveryList for `/api` (core=True) or `/apis`."""
    items = []
    for group, versions in reg.group_versions().items():
        if bool(group) == core:
            continue
        item = {"metadata": {"name": group} if group else {}, "versions": [
            {"version": v, "freshness": "Current",
             "resources": [_aggregated_resource(rt) for rt in reg.in_group_version(group, v)]}
            for v in versions]}
        items.append(item)
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


_FIELD_VALIDATION = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def openapi_v3_document(reg: Registry, group: str, version: str) -> dict | None:
    if version not in reg.group_versions().get(group, []):
        return None
    paths: dict = {}
    for rt in reg.in_group_version(group, version):
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        root = "/" + _gv_path(group, version)
        coll = f"{root}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{root}/{rt.plural}"

        def op(verb: str, gvk=gvk) -> dict:
            return {"x-kubernetes-action": verb, "x-kubernetes-group-version-kind": gvk,
                    "parameters": [_FIELD_VALIDATION], "responses": {"200": {"description": "OK"}}}

        paths[coll] = {"post": op("post")}
        paths[f"{coll}/{{name}}"] = {"put": op("put"), "patch": op("patch")}
        if rt.status:
            paths[f"{coll}/{{name}}/status"] = {"put": op("put"), "patch": op("patch")}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.31.0"},
            "paths": paths, "components": {"schemas": {}}}
