"""The product's name rule and the label and annotation keys kubesim and the gateway read too: spelled once."""

from __future__ import annotations

import re

# The names of the product's objects (tenants, clusters, models, adapters, services): DNS-1123 labels, as they
# become Kubernetes object names. The control plane validates them (apps.core.validators) and the gateway
# checks a request's `model` by the same rule before it counts the request as anything.
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 63
FIELD_PREFIX = "controlplane.io"
# On a serverless service's router pods: hold requests this many seconds while no engine is ready
# (activation); the control plane renders it and kubesim's routers honour it.
ACTIVATION_HOLD_ANNOTATION = f"{FIELD_PREFIX}/activation-hold-seconds"
# On the pods and objects of a canary unit (the new revision running beside the stable one): its revision
# number. Stable pods carry none.
REVISION_LABEL = f"{FIELD_PREFIX}/revision"
# On a router pod during a canary rollout: "<revision>=<percent>", the share of requests the pods labelled
# with that revision get (the others share the rest); the control plane renders it, kubesim's routers honour it.
CANARY_WEIGHTS_ANNOTATION = f"{FIELD_PREFIX}/canary-weights"


def canary_weights_value(revision: int, percent: int) -> str:
    return f"{revision}={percent}"


def parse_canary_weights(value: str | None) -> dict[str, int]:
    """{revision label value: percent} from the annotation; empty when absent or malformed."""
    shares: dict[str, int] = {}
    for part in (value or "").split(","):
        revision, sep, percent = part.strip().partition("=")
        if sep and revision and percent.isdigit() and 0 <= int(percent) <= 100:
            shares[revision] = int(percent)
    return shares


# On a node: the model agent's mark that the node's local disk holds a complete copy of a model's weights
# (`models.controlplane.io/<model>: "true"`), as OME's model agent and KServe's LocalModelNode label nodes.
MODEL_HELD_PREFIX = "models.controlplane.io"


def model_held_label(model: str) -> str:
    """The node label that says the node holds `model`'s weights on its local disk."""
    return f"{MODEL_HELD_PREFIX}/{model}"


# On an engine pod: where it reads its weights, as JSON {"model", "bytes", "node_path", "cluster_cache"}: the
# node-local copy at `node_path` when the node is labelled as holding the model (no `node_path`: the pod mounts no
# node copy, its cluster's node model volume being "none"), else the cluster cache named by
# `cluster_cache` (one per cluster for a platform-wide model, "<namespace>/<claim>" for a private one; empty for
# weights on a claim of their own). kubesim times the pod's start-up phases from it.
WEIGHTS_ANNOTATION = f"{FIELD_PREFIX}/weights"
