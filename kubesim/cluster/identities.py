"""Who the cluster's own components are when they call the API server, and the RBAC that lets them.

As kube-controller-manager does with `--use-service-account-credentials`, each component (named by its
field manager) acts as a ServiceAccount of `kube-system`, bound by a ClusterRoleBinding to a ClusterRole
`system:controller:<name>`; the API server's own writes (its Service and Endpoints, Event expiry) are
the loopback identity `system:apiserver` in `system:masters`. Under `--authorization rbac` deleting a
component's binding stops that component as it would stop it upstream.
"""

from __future__ import annotations

from kubesim.apiserver.rbac import AUTHENTICATED, MASTERS, RBAC, User, service_account_user

NAMESPACE = "kube-system"
APISERVER = "kube-apiserver"
APISERVER_USER = User("system:apiserver", (MASTERS, AUTHENTICATED))
COMPONENTS = (
    "kube-controller-manager",  # the informers and the controllers that share them
    "default-scheduler",
    "kubelet",
    "node-controller",
    "lws-controller",
    "job-controller",
    "horizontal-pod-autoscaler",
    "kubesim-events",
    "gpu-operator",
    "generic-garbage-collector",
    "namespace-controller",
    "kueue-controller-manager",  # only acts where Kueue is installed (the default)
    "model-agent",  # copies the chosen models to nodes' disks and labels the nodes (kubesim/cluster/model_agent.py)
)
# The components write every kind they reconcile, including custom resources of any group (LeaderWorkerSet,
# scale targets), so their roles are broad; what RBAC adds is that each is an identity that can be refused.
_RULES = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]


def component_user(field_manager: str) -> User:
    """The identity a component's calls are authorized as."""
    if field_manager == APISERVER:
        return APISERVER_USER
    return service_account_user(NAMESPACE, field_manager)


def role_name(component: str) -> str:
    return f"system:controller:{component}"


def bootstrap_rbac() -> list[tuple[str, dict]]:
    """(resource, object) for each component's ClusterRole and ClusterRoleBinding."""
    meta = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}
    out = []
    for component in COMPONENTS:
        name = role_name(component)
        out.append((f"{RBAC}/clusterroles", {"metadata": {"name": name, **meta}, "rules": _RULES}))
        out.append((f"{RBAC}/clusterrolebindings", {
            "metadata": {"name": name, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": component, "namespace": NAMESPACE}]}))
    return out
