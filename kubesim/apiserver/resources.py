"""The kinds kubesim serves: built-in types and those defined by CustomResourceDefinitions.

A `ResourceType` is what the store, discovery and the HTTP router key everything on. The `Registry`
starts with the built-in kinds; the store adds and removes entries as CRD objects come and go.
The custom kinds the product relies on (LeaderWorkerSet, ScaledObject, Gateway API, InferencePool,
ServiceMonitor) are installed as CRD objects at start, as on a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ScalePaths:
    """Where the scale subresource reads and writes replicas (CRD `subresources.scale`)."""

    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    label_selector: str | None = ".status.selector"


@dataclass
class ResourceType:
    """One served resource: `(group, version, plural)` plus what discovery and the store need."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    status: bool = False  # has a /status subresource
    scale: ScalePaths | None = None  # has a /scale subresource
    custom: bool = False  # defined by a CRD: no strategic merge patch, PUT needs a resourceVersion
    required: tuple[str, ...] = ()  # dotted paths a create/update must carry (422 otherwise)

    def __post_init__(self):
        if not self.singular:
            self.singular = self.kind.lower()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """`deployments.apps`, or `configmaps` for the core group (the apiserver's wording)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def verbs(self) -> list[str]:
        return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

    def base_path(self, namespace: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


_POD_TEMPLATE = ("spec.template", "spec.template.spec.containers")


def builtin_types() -> list[ResourceType]:
    """The built-in kinds, in discovery order."""
    sp = ScalePaths()
    return [
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"], status=True),
        ResourceType("", "v1", "nodes", "Node", namespaced=False, short_names=["no"], status=True),
        ResourceType("", "v1", "pods", "Pod", short_names=["po"], categories=["all"], status=True,
                     required=("spec.containers",)),
        ResourceType("", "v1", "services", "Service", short_names=["svc"], categories=["all"], status=True),
        ResourceType("", "v1", "endpoints", "Endpoints", singular="endpoints", short_names=["ep"]),
        ResourceType("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
        ResourceType("", "v1", "secrets", "Secret"),
        ResourceType("", "v1", "events", "Event", short_names=["ev"], required=("involvedObject",)),
        ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=["pvc"],
                     status=True),
        ResourceType("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False, short_names=["pv"],
                     status=True),
        ResourceType("", "v1", "resourcequotas", "ResourceQuota", short_names=["quota"], status=True),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
        ResourceType("apps", "v1", "deployments", "Deployment", short_names=["deploy"], categories=["all"],
                     status=True, scale=sp, required=("spec.selector", *_POD_TEMPLATE)),
        ResourceType("apps", "v1", "replicasets", "ReplicaSet", short_names=["rs"], categories=["all"],
                     status=True, scale=sp, required=("spec.selector",)),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", short_names=["sts"], categories=["all"],
                     status=True, scale=sp, required=("spec.selector", *_POD_TEMPLATE)),
        ResourceType("batch", "v1", "jobs", "Job", categories=["all"], status=True,
                     required=("spec.template.spec.containers",)),
        ResourceType("networking.k8s.io", "v1", "ingresses", "Ingress", short_names=["ing"], status=True),
        # Enforced for ingress by the pod and service proxies (kubesim/cluster/netpol.py).
        ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short_names=["netpol"]),
        ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
                     short_names=["hpa"], categories=["all"], status=True,
                     required=("spec.scaleTargetRef", "spec.scaleTargetRef.kind", "spec.scaleTargetRef.name",
                               "spec.maxReplicas")),
        # Read by Kueue for a pod's priority when it names no WorkloadPriorityClass.
        ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False,
                     short_names=["pc"], required=("value",)),
        ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short_names=["pdb"],
                     status=True),
        # RBAC objects are stored and listed (routers ship a Role to list pods); kubesim does not authorize.
        ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", required=("roleRef",)),
        ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                     namespaced=False, required=("roleRef",)),
        ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                     namespaced=False, short_names=["crd", "crds"], categories=["api-extensions"], status=True,
                     required=("spec.group", "spec.names.plural", "spec.names.kind", "spec.scope",
                               "spec.versions")),
    ]


# Group/versions served with no resources of their own (autoscaling/v1 only carries Scale).
EMPTY_GROUP_VERSIONS = [("autoscaling", "v1")]


def crd(group: str, version: str, plural: str, kind: str, *, short: list[str] | None = None,
        categories: list[str] | None = None, status: bool = True, scale: dict | None = None,
        namespaced: bool = True, schema: dict | None = None, columns: list[dict] | None = None) -> dict:
    """A CustomResourceDefinition object serving one version; without `schema`, any fields are kept."""
    subresources: dict = {}
    if status:
        subresources["status"] = {}
    if scale:
        subresources["scale"] = scale
    names = {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": kind + "List"}
    if short:
        names["shortNames"] = short
    if categories:
        names["categories"] = categories
    served = {
        "name": version, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "subresources": subresources,
    }
    if columns:
        served["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": "Namespaced" if namespaced else "Cluster",
                 "versions": [served]},
    }


def preinstalled_crds() -> list[dict]:
    """CRD objects a product cluster has installed: LWS, KEDA, Gateway API, GIE, Prometheus Operator."""
    return [
        crd("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", short=["lws"],
             scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.hpaPodSelector"}),
        crd("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject", short=["so"]),
        crd("gateway.networking.k8s.io", "v1", "gateways", "Gateway", short=["gtw"],
             categories=["gateway-api"]),
        crd("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute", categories=["gateway-api"]),
        crd("inference.networking.k8s.io", "v1", "inferencepools", "InferencePool", short=["infpool"]),
        crd("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", short=["smon"],
             categories=["prometheus-operator"], status=False),
    ]


def types_from_crd(crd: dict) -> list[ResourceType]:
    """The ResourceTypes a CRD object serves, one per served version (storage version first)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    versions = sorted(spec.get("versions") or [], key=lambda v: not v.get("storage"))
    for v in versions:
        if not v.get("served", True):
            continue
        sub = v.get("subresources") or spec.get("subresources") or {}
        scale = None
        if "scale" in sub:
            s = sub["scale"] or {}
            scale = ScalePaths(s.get("specReplicasPath", ".spec.replicas"),
                               s.get("statusReplicasPath", ".status.replicas"), s.get("labelSelectorPath"))
        out.append(ResourceType(
            spec["group"], v["name"], names["plural"], names["kind"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            singular=names.get("singular") or names["kind"].lower(),
            short_names=list(names.get("shortNames") or []),
            categories=list(names.get("categories") or []),
            status="status" in sub, scale=scale, custom=True,
        ))
    return out


class Registry:
    """The resource types currently served, looked up by `(group, version, plural)`."""

    def __init__(self):
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self.generation = 0  # bumped whenever the served set changes (discovery/openapi hashes)
        for rt in builtin_types():
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._types[rt.key] = rt
        self.generation += 1

    def remove(self, key: tuple[str, str, str]) -> None:
        if self._types.pop(key, None) is not None:
            self.generation += 1

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def resolve(self, resource) -> ResourceType:
        """Accept a ResourceType, a `(group, version, plural)` tuple or `"apps/v1/deployments"`."""
        if isinstance(resource, ResourceType):
            return self._types.get(resource.key, resource)
        if isinstance(resource, str):
            parts = resource.split("/")
            resource = ("", *parts) if len(parts) == 2 else tuple(parts)
        rt = self._types.get(tuple(resource))
        if rt is None:
            raise KeyError(f"unknown resource {resource!r}")
        return rt

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self._types.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions (preferred first), including group/versions without resources."""
        out: dict[str, list[str]] = {}
        for rt in self._types.values():
            vs = out.setdefault(rt.group, [])
            if rt.version not in vs:
                vs.append(rt.version)
        for g, v in EMPTY_GROUP_VERSIONS:
            if g in out and v not in out[g]:
                out[g].append(v)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]
