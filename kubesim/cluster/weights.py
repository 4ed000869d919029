"""Where a pod's weights come from on its node, and the cluster cache's fill mark (the kubelet side of the model cache).

The control plane annotates each engine pod with its weights (`WEIGHTS_ANNOTATION`); the node's label
(`model_held_label`) says the model agent copied them to the node's disk. Otherwise the pod reads the cluster cache,
a claim marked complete (`WEIGHTS_COMPLETE_ANNOTATION`) once a first pod downloaded the weights into it.
"""

from __future__ import annotations

import json

from capacity.startup import cache_on_node
from enginevocab.labels import WEIGHTS_ANNOTATION, WEIGHTS_COMPLETE_ANNOTATION, model_held_label

CLAIMS = "v1/persistentvolumeclaims"


def weights_of(pod: dict) -> dict | None:
    """The pod's weights annotation as a dict (None without one, or when it is not a JSON object)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(WEIGHTS_ANNOTATION)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("model"), str) else None


def _claim(weights: dict) -> tuple[str, str] | None:
    namespace, _, name = str(weights.get("cluster_cache") or "").partition("/")
    return (namespace, name) if namespace and name else None


async def cache_for(api, pod: dict, node: dict) -> str | None:
    """"node", "cluster" or "none" for a pod with a weights annotation on `node`; None without one."""
    weights = weights_of(pod)
    if weights is None:
        return None
    claim = _claim(weights)
    filled = True  # weights on a claim of their own (a pvc:// source) are there already
    if claim is not None:
        current = await api.get(CLAIMS, *claim)
        annotations = (current or {}).get("metadata", {}).get("annotations") or {}
        filled = annotations.get(WEIGHTS_COMPLETE_ANNOTATION) == "true"
    labels = (node.get("metadata") or {}).get("labels") or {}
    return cache_on_node(labels, model_held_label(weights["model"]), filled)


async def mark_filled(api, pod: dict) -> None:
    """The pod finished downloading its weights: its cluster cache holds them from now on."""
    weights = weights_of(pod)
    claim = _claim(weights) if weights else None
    if claim is None:
        return

    def mark(obj: dict) -> None:
        obj["metadata"].setdefault("annotations", {})[WEIGHTS_COMPLETE_ANNOTATION] = "true"

    await api.mutate(CLAIMS, *claim, mark)
