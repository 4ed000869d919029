"""How an engine pod reaches the node's copy of its cached weights, chosen per cluster (`Cluster.node_model_volume`):
"none" mounts no node volume and reads the cluster cache, "hostPath" mounts the model agent's directory read-only
(the tenant namespace then enforces Pod Security "privileged"), "csi" mounts the driver's inline volume. Expected
values are written out by hand from docs/cold-start.md."""

import dataclasses
import json

import pytest

from apps.serving.rendering import render_service
from apps.serving.rendering.modelagent import agent_daemonset
from enginevocab.labels import WEIGHTS_ANNOTATION
from tests.serving.golden.specs import LLAMA_8B, SPECS

ENFORCE = "pod-security.kubernetes.io/enforce"


def spec(volume: str, **changes):
    return dataclasses.replace(SPECS["standard-vllm"](), has_gateway=False, node_model_volume=volume, **changes)


def rendered(service_spec) -> tuple[dict, dict]:
    """(the engine Deployment's pod template, the tenant Namespace)."""
    objects = render_service(service_spec)
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat")
    namespace = next(o for o in objects if o["kind"] == "Namespace")
    return deployment["spec"]["template"], namespace


def containers(pod: dict) -> dict[str, dict]:
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_none_mounts_no_node_copy_and_the_select_container_says_the_cluster_cache():
    template, namespace = rendered(spec("none"))
    pod = template["spec"]
    assert "node-model" not in json.dumps(pod)
    # The links, the cluster cache, shared memory and vLLM's non-root home: no node volume.
    assert [v["name"] for v in pod["volumes"]] == ["model-cache", "weights", "dshm", "home"]
    by_name = containers(pod)
    assert [m["name"] for m in by_name["select-weights"]["volumeMounts"]] == ["weights", "model-cache"]
    assert by_name["select-weights"]["command"][2] == "\n".join([
        "set -eu",
        "for entry in /cluster-models/* /cluster-models/.[!.]*; do",
        '  if [ -e "$entry" ]; then ln -sfn "$entry" "/models/$(basename "$entry")"; fi',
        "done",
        "echo 'weights: cluster cache (no node-local copies on this cluster)'",
    ])
    assert [m["name"] for m in by_name["engine"]["volumeMounts"]][:2] == ["weights", "model-cache"]
    assert "affinity" not in pod  # nothing to prefer: no node copy is read
    # The annotation names no node path, so kubesim (and people) know the pod reads the cluster cache only.
    annotation = json.loads(template["metadata"]["annotations"][WEIGHTS_ANNOTATION])
    assert annotation == {"model": "llama-3-1-8b", "bytes": 16_060_000_000,
                          "cluster_cache": annotation["cluster_cache"]}
    assert annotation["cluster_cache"].startswith("tenant-acme/model-llama-3-1-8b-")
    assert namespace["metadata"]["labels"][ENFORCE] == "baseline"


def test_hostpath_mounts_the_agents_directory_read_only_and_the_namespace_allows_it():
    template, namespace = rendered(spec("hostPath"))
    pod = template["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["node-model"] == {"name": "node-model", "hostPath": {
        "path": "/var/lib/controlplane/models/llama-3-1-8b", "type": "DirectoryOrCreate"}}
    for name in ("select-weights", "engine"):
        mount = next(m for m in containers(pod)[name]["volumeMounts"] if m["name"] == "node-model")
        assert mount == {"name": "node-model", "mountPath": "/node-model", "readOnly": True}
    script = containers(pod)["select-weights"]["command"][2]
    assert "if [ -f /node-model/.complete ]; then" in script
    assert "ln -sfn /node-model /models/Llama-3.1-8B-Instruct" in script
    term = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["preference"]["matchExpressions"] == [
        {"key": "models.controlplane.io/llama-3-1-8b", "operator": "In", "values": ["true"]}]
    assert json.loads(template["metadata"]["annotations"][WEIGHTS_ANNOTATION])["node_path"] == \
        "/var/lib/controlplane/models/llama-3-1-8b"
    # baseline refuses hostPath volumes; restricted is still warned about.
    labels = namespace["metadata"]["labels"]
    assert (labels[ENFORCE], labels["pod-security.kubernetes.io/warn"]) == ("privileged", "restricted")
    # The agent's DaemonSet writes where the pods read: the same directory on the node.
    agent = agent_daemonset("registry.example/cp:1")["spec"]["template"]["spec"]
    models = next(v for v in agent["volumes"] if v["name"] == "models")
    assert volumes["node-model"]["hostPath"]["path"].startswith(models["hostPath"]["path"] + "/")


def test_csi_mounts_the_drivers_inline_volume_and_keeps_baseline():
    template, namespace = rendered(spec("csi"))
    pod = template["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["node-model"] == {"name": "node-model", "csi": {
        "driver": "models.controlplane.io", "readOnly": True, "volumeAttributes": {"model": "llama-3-1-8b"}}}
    assert "hostPath" not in json.dumps(pod)
    assert "if [ -f /node-model/.complete ]; then" in containers(pod)["select-weights"]["command"][2]
    assert namespace["metadata"]["labels"][ENFORCE] == "baseline"


def test_a_shared_platform_cache_is_named_beside_the_reason_under_none(settings):
    settings.PLATFORM_MODEL_CACHE = "nfs://nfs.example.internal/exports/models"
    platform = dataclasses.replace(LLAMA_8B, platform_wide=True)
    template, _ = rendered(spec("none", model=platform))
    script = containers(template["spec"])["select-weights"]["command"][2]
    claim = json.loads(template["metadata"]["annotations"][WEIGHTS_ANNOTATION])["cluster_cache"].split("/")[1]
    assert script.endswith(f"echo 'weights: cluster cache (nfs://nfs.example.internal/exports/models/{claim}, "
                           "no node-local copies on this cluster)'")


@pytest.mark.parametrize("volume", ["none", "hostPath", "csi"])
def test_weights_on_a_claim_of_their_own_mount_no_node_copy_whatever_the_cluster_chose(volume):
    template, namespace = rendered(spec(volume, model=dataclasses.replace(LLAMA_8B, source_uri="pvc://shared/llama")))
    assert "node-model" not in json.dumps(template)
    # The namespace follows the cluster's choice all the same: its other services may read node copies.
    assert namespace["metadata"]["labels"][ENFORCE] == ("privileged" if volume == "hostPath" else "baseline")


def test_an_unknown_choice_is_refused_by_the_spec():
    with pytest.raises(ValueError, match="unknown node model volume 'nfs'"):
        spec("nfs")
