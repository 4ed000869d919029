"""The model agent's objects in the platform namespace: its plan (a ConfigMap the agent reads), its DaemonSet, its
RBAC and its claim on the shared cluster cache.

The agent (`python -m workers.modelagent`, in the control plane's image) runs on every GPU node: it copies the planned
models from the cluster cache (the shared backing volume of `settings.PLATFORM_MODEL_CACHE`,
apps/serving/sharedcache.py) to the node's disk (`/var/lib/controlplane/models`), within the budget, least recently
used evicted first, labels the node with each model it holds (`models.controlplane.io/<model>`) and reports progress
as Events on the Node. kubesim runs the same behaviour (kubesim/cluster/model_agent.py).
`manage.py model_agent_manifest --image IMAGE` prints these objects for the installer.
"""

from __future__ import annotations

import json

from apps.serving.names import GATEWAY_NAMESPACE, MANAGED_BY, MANAGED_BY_LABEL, NAME_LABEL
from apps.serving.rendering.weights import NODE_MODELS_PATH
from apps.serving.sharedcache import shared_claim

AGENT_NAME = "model-agent"
PLAN_KEY = "plan"
LABELS = {MANAGED_BY_LABEL: MANAGED_BY, NAME_LABEL: AGENT_NAME}
CACHE_CLAIM = "model-agent-cluster-cache"
CACHE_DIR = "/cluster-cache"  # the shared volume's root in the agent's pod: `<claim>/<source dir>` per model
# What the agent calls: its node (read, label), its Events, and the pods on its node (the models they read).
AGENT_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
]


def plan_config_map(plan: dict) -> dict:
    """The agent's plan: budget and the models each node should hold."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": AGENT_NAME, "namespace": GATEWAY_NAMESPACE, "labels": dict(LABELS)},
            "data": {PLAN_KEY: json.dumps(plan, sort_keys=True)}}


def agent_daemonset(image: str) -> dict:
    """One agent pod per GPU node, with the node's model directory, the shared cluster cache (read-only), its plan
    and the kubelet's CSI plugin directory."""
    container = {
        "name": "agent", "image": image,
        "command": ["python", "-m", "workers.modelagent"],
        "args": ["--plan", f"/etc/model-agent/{PLAN_KEY}", "--cache", CACHE_DIR, "--models", NODE_MODELS_PATH],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [{"name": "models", "mountPath": NODE_MODELS_PATH},
                         {"name": "cluster-cache", "mountPath": CACHE_DIR, "readOnly": True},
                         {"name": "plan", "mountPath": "/etc/model-agent", "readOnly": True},
                         {"name": "csi", "mountPath": "/var/lib/kubelet/plugins/models.controlplane.io"}],
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
    }
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": AGENT_NAME, "namespace": GATEWAY_NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(LABELS)},
            "template": {"metadata": {"labels": dict(LABELS)}, "spec": {
                "serviceAccountName": AGENT_NAME,  # labels nodes and records Events: its own RBAC
                "tolerations": [{"operator": "Exists"}],  # GPU nodes are tainted
                "containers": [container],
                "volumes": [
                    {"name": "models", "hostPath": {"path": NODE_MODELS_PATH, "type": "DirectoryOrCreate"}},
                    {"name": "cluster-cache", "persistentVolumeClaim": {"claimName": CACHE_CLAIM, "readOnly": True}},
                    {"name": "plan", "configMap": {"name": AGENT_NAME}},
                    {"name": "csi", "hostPath": {"path": "/var/lib/kubelet/plugins/models.controlplane.io",
                                                 "type": "DirectoryOrCreate"}},
                ],
            }},
        },
    }


def agent_objects(image: str, shared_cache: str, cache_size: str = "10Ti") -> list[dict]:
    """Everything the agent needs but its plan, in apply order: its ServiceAccount and cluster RBAC, its own volume
    and claim on the shared cluster cache `shared_cache`, and the DaemonSet. ValueError without a shared cache: the
    agent copies from the one cluster cache of platform models, which only a shared volume gives."""
    if not shared_cache:
        raise ValueError("the model agent copies from the shared cluster cache: set PLATFORM_MODEL_CACHE")
    meta = {"name": AGENT_NAME, "labels": dict(LABELS)}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": CACHE_CLAIM, "namespace": GATEWAY_NAMESPACE, "labels": dict(LABELS)},
             "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
                      "resources": {"requests": {"storage": cache_size}}}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": GATEWAY_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": AGENT_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": GATEWAY_NAMESPACE}]},
        *shared_claim(shared_cache, claim),
        agent_daemonset(image),
    ]
