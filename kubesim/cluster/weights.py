"""Where a pod's weights come from on its node (the kubelet side of the model cache).

The control plane annotates each engine pod with its weights (`WEIGHTS_ANNOTATION`); the node's label
(`model_held_label`) says the model agent copied them to the node's disk. Otherwise the pod reads the cluster cache
named by the annotation (`cluster_cache`: one per cluster for a platform-wide model, one per tenant namespace for a
private one), which a first pod fills by downloading the weights from the model's source. On a real volume the fetch
script's `.complete` file records that; kubesim has no volume contents, so the cluster keeps the set of filled caches.
"""

from __future__ import annotations

import json

from capacity.startup import cache_on_node
from enginevocab.labels import WEIGHTS_ANNOTATION, model_held_label


def weights_of(pod: dict) -> dict | None:
    """The pod's weights annotation as a dict (None without one, or when it is not a JSON object with a model)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(WEIGHTS_ANNOTATION)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("model"), str) else None


class FilledCaches:
    """The cluster caches that hold their weights: a set of `cluster_cache` keys, filled by a pod's download."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def cache_for(self, pod: dict, node: dict) -> str | None:
        """"node", "cluster" or "none" for a pod with a weights annotation on `node`; None without one. A pod whose
        weights are on a claim of their own (a pvc:// source, no `cluster_cache`) finds them there already; one
        without `node_path` mounts no node copy (its cluster's node model volume is "none") and never reads it."""
        weights = weights_of(pod)
        if weights is None:
            return None
        key = weights.get("cluster_cache")
        filled = not key or key in self.keys
        labels = ((node.get("metadata") or {}).get("labels") or {}) if weights.get("node_path") else {}
        return cache_on_node(labels, model_held_label(weights["model"]), filled)

    def fill(self, pod: dict) -> None:
        """The pod finished downloading its weights: its cluster cache holds them from now on."""
        weights = weights_of(pod)
        if weights and weights.get("cluster_cache"):
            self.keys.add(str(weights["cluster_cache"]))

