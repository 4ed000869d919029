"""The model agent's objects in the platform namespace: its plan (a ConfigMap the agent reads) and its DaemonSet.

The agent runs on every GPU node: it copies the planned models from the cluster cache to the node's disk
(`/var/lib/controlplane/models`), within the budget, least recently used evicted first, labels the node with each
model it holds (`models.controlplane.io/<model>`), reports progress as Events on the Node, and serves the copies to
engine pods as the CSI driver `models.controlplane.io`. kubesim runs the same behaviour
(kubesim/cluster/model_agent.py).
"""

from __future__ import annotations

import json

from apps.serving.names import GATEWAY_NAMESPACE, MANAGED_BY, MANAGED_BY_LABEL, NAME_LABEL
from apps.serving.rendering.weights import NODE_MODELS_PATH

AGENT_NAME = "model-agent"
PLAN_KEY = "plan"
LABELS = {MANAGED_BY_LABEL: MANAGED_BY, NAME_LABEL: AGENT_NAME}


def plan_config_map(plan: dict) -> dict:
    """The agent's plan: budget and the models each node should hold."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": AGENT_NAME, "namespace": GATEWAY_NAMESPACE, "labels": dict(LABELS)},
            "data": {PLAN_KEY: json.dumps(plan, sort_keys=True)}}


def agent_daemonset(image: str) -> dict:
    """One agent pod per GPU node, with the node's model directory and the kubelet's CSI plugin directory."""
    container = {
        "name": "agent", "image": image,
        "args": ["--plan", f"/etc/model-agent/{PLAN_KEY}", "--models", NODE_MODELS_PATH],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [{"name": "models", "mountPath": NODE_MODELS_PATH},
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
                    {"name": "plan", "configMap": {"name": AGENT_NAME}},
                    {"name": "csi", "hostPath": {"path": "/var/lib/kubelet/plugins/models.controlplane.io",
                                                 "type": "DirectoryOrCreate"}},
                ],
            }},
        },
    }
