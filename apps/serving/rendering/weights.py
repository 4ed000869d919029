"""Where an engine pod reads its weights: the node-local copy the model agent made, else the cluster cache.

How a pod reaches the node's copy is the cluster's choice (`Cluster.node_model_volume`, `spec.node_model_volume`):
- "none" (a cluster without a model agent): no node volume; the pod reads the cluster cache only;
- "hostPath": the agent's directory for the model on the node (`NODE_MODELS_PATH/<model>`), mounted read-only; Pod
  Security "baseline" refuses hostPath, so the tenant namespace is labelled "privileged" (`pod_security_labels`);
- "csi": an inline volume of the driver `models.controlplane.io`, read-only (baseline allows CSI volumes); no node
  plugin for it ships here: the operator installs one.
With a node volume the pod mounts both it and the cluster cache claim, and a `select-weights` init container links the
model directory under /models to the node-local copy when that copy is complete, else to the cluster cache, and prints
which; the engine reads /models/<model> either way. The pod's weights annotation says the same for kubesim and for
people (`kubectl describe pod`: `node_path` only when the pod can read a node copy), and a preferred node affinity
asks the scheduler for nodes that hold the weights already.
"""

from __future__ import annotations

import json
import shlex

from django.conf import settings

from apps.serving.names import POD_SECURITY_LABELS, cache_claim_name, cluster_cache_key
from apps.serving.rendering.localsource import is_local
from apps.serving.rendering.spec import ServiceSpec
from apps.serving.sharedcache import source_words
from enginevocab.labels import WEIGHTS_ANNOTATION, model_held_label

MODELS_DIR = "/models"  # what the engine reads: links chosen by the select-weights container
CLUSTER_CACHE_DIR = "/cluster-models"  # the cluster cache claim
NODE_CACHE_DIR = "/node-model"  # the node's copy of the model (empty when the node holds none)
NODE_MODELS_PATH = "/var/lib/controlplane/models"  # on the node: where the model agent keeps its copies
MODEL_AGENT_CSI_DRIVER = "models.controlplane.io"  # "csi": a node plugin for it publishes the copy (none ships here)
WARM_NODE_WEIGHT = 100  # the preferred affinity's weight (1-100): the strongest preference, never a requirement


def cached(spec: ServiceSpec) -> bool:
    """Whether the model's weights go through the caches (a pvc:// source is read from its own claim, a local://
    one from the node's folder)."""
    return not spec.model.source_uri.startswith("pvc://") and not is_local(spec.model.source_uri)


def shared_cache(spec: ServiceSpec) -> str:
    """The shared backing volume a platform model's cluster cache lives on (`settings.PLATFORM_MODEL_CACHE`,
    apps/serving/sharedcache.py), or "" when the namespace's claim is provisioned on its own."""
    return settings.PLATFORM_MODEL_CACHE if cached(spec) and spec.model.platform_wide else ""


def cache_source(spec: ServiceSpec) -> str:
    """Where the pod's cluster cache is, in words: the shared volume's directory, or the namespace's claim."""
    shared = shared_cache(spec)
    claim = cache_claim_name(spec)
    return source_words(shared, claim) if shared else f"claim {spec.namespace}/{claim}"


def share_mounts(spec: ServiceSpec, pod_spec: dict) -> None:
    """On the shared volume, every container mounts the model's own directory (`subPath: <claim>`)."""
    if not shared_cache(spec):
        return
    for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
        for mount in container.get("volumeMounts", []):
            if mount["name"] == "model-cache":
                mount["subPath"] = cache_claim_name(spec)


def reads_node_copy(spec: ServiceSpec) -> bool:
    """Whether the pod mounts the node's copy of its cached weights (its cluster chose hostPath or csi)."""
    return cached(spec) and spec.node_model_volume != "none"


def pod_security_labels(node_model_volume: str) -> dict[str, str]:
    """The tenant namespace's Pod Security labels: "baseline" enforced, but "privileged" on a cluster whose pods
    mount the node's copy by hostPath (no level between the two allows hostPath); "restricted" warned about always."""
    if node_model_volume != "hostPath":
        return dict(POD_SECURITY_LABELS)
    return {**POD_SECURITY_LABELS, "pod-security.kubernetes.io/enforce": "privileged"}


def node_copy_path(spec: ServiceSpec) -> str:
    """Where the model agent keeps the model's copy on a node."""
    return f"{NODE_MODELS_PATH}/{spec.model.name}"


def weights_annotations(spec: ServiceSpec) -> dict[str, str]:
    """The pod annotation naming where its weights are read from (empty for weights on their own claim)."""
    if not cached(spec):
        return {}
    value = {"model": spec.model.name, "bytes": spec.model.weights_bytes, "cluster_cache": cluster_cache_key(spec)}
    if reads_node_copy(spec):
        value["node_path"] = node_copy_path(spec)
    if shared_cache(spec):
        value["cluster_cache_volume"] = cache_source(spec)
    return {WEIGHTS_ANNOTATION: json.dumps(value, sort_keys=True)}


def warm_node_affinity(spec: ServiceSpec) -> dict:
    """Preferred (not required) node affinity to nodes labelled as holding the model's weights; none when the pod
    cannot read a node's copy."""
    if not reads_node_copy(spec):
        return {}
    term = {"matchExpressions": [{"key": model_held_label(spec.model.name), "operator": "In", "values": ["true"]}]}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": WARM_NODE_WEIGHT, "preference": term}]}}


NO_NODE_COPIES = "no node-local copies on this cluster"


def select_script(model_dir: str, cache_words: str = "", node_copy: bool = True) -> str:
    """POSIX sh: link every entry of the cluster cache under /models, then, with `node_copy`, the model's own
    directory to the node's copy when that copy is complete; says which (and, given `cache_words`, where the cluster
    cache is). Without `node_copy` (the cluster's choice "none") it says the cluster cache and why."""
    name = shlex.quote(model_dir)
    words = ", ".join(w for w in (cache_words, "" if node_copy else NO_NODE_COPIES) if w)
    cache_said = shlex.quote(f"weights: cluster cache ({words})") if words else '"weights: cluster cache"'
    links = [
        "set -eu",
        f"for entry in {CLUSTER_CACHE_DIR}/* {CLUSTER_CACHE_DIR}/.[!.]*; do",
        f'  if [ -e "$entry" ]; then ln -sfn "$entry" "{MODELS_DIR}/$(basename "$entry")"; fi',
        "done",
    ]
    if not node_copy:
        return "\n".join([*links, f"echo {cache_said}"])
    return "\n".join([
        *links,
        f"if [ -f {NODE_CACHE_DIR}/.complete ]; then",
        f'  ln -sfn {NODE_CACHE_DIR} {MODELS_DIR}/{name}; echo "weights: node-local copy"',
        "else",
        f"  echo {cache_said}",
        "fi",
    ])


def select_container(spec: ServiceSpec, image: str, model_dir: str) -> dict:
    """The init container that picks the node-local copy or the cluster cache (after the fetch containers)."""
    node = reads_node_copy(spec)
    return {
        "name": "select-weights",
        "image": image,
        "command": ["sh", "-c", select_script(model_dir, cache_source(spec) if shared_cache(spec) else "", node)],
        "volumeMounts": [{"name": "weights", "mountPath": MODELS_DIR},
                         {"name": "model-cache", "mountPath": CLUSTER_CACHE_DIR, "readOnly": True},
                         *([NODE_MODEL_MOUNT] if node else [])],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }


NODE_MODEL_MOUNT = {"name": "node-model", "mountPath": NODE_CACHE_DIR, "readOnly": True}


def node_model_volume(spec: ServiceSpec) -> dict | None:
    """The node's copy of the model as the cluster chose to reach it; None for "none". hostPath's type
    DirectoryOrCreate leaves an empty directory on a node without the copy (select-weights then finds no `.complete`
    and takes the cluster cache) instead of failing the pod; the mounts are read-only."""
    if not reads_node_copy(spec):
        return None
    if spec.node_model_volume == "hostPath":
        return {"name": "node-model", "hostPath": {"path": node_copy_path(spec), "type": "DirectoryOrCreate"}}
    return {"name": "node-model", "csi": {"driver": MODEL_AGENT_CSI_DRIVER, "readOnly": True,
                                         "volumeAttributes": {"model": spec.model.name}}}


def weights_volumes(spec: ServiceSpec) -> tuple[list[dict], list[dict]]:
    """The cached weights' volumes and the engine's mounts of them (the links, the cluster cache, and the node's copy
    when the cluster gives one: the links point into both)."""
    vols = [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache_claim_name(spec)}},
        {"name": "weights", "emptyDir": {"sizeLimit": "1Mi"}},
    ]
    mounts = [
        {"name": "weights", "mountPath": MODELS_DIR, "readOnly": True},
        {"name": "model-cache", "mountPath": CLUSTER_CACHE_DIR, "readOnly": True},
    ]
    node = node_model_volume(spec)
    if node is not None:
        vols.append(node)
        mounts.append(dict(NODE_MODEL_MOUNT))
    return vols, mounts
