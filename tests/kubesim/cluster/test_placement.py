"""Node specs, resource arithmetic and the scheduler's filters, as pure functions over plain dicts."""

import pytest

from kubesim.apiserver.admission.tolerations import extended_resource_tolerations
from kubesim.apiserver.quantities import format_units, pod_requests, to_units
from kubesim.cluster.nodes import build_nodes, parse_nodes
from kubesim.cluster.placement import (
    FitError,
    NodeUsage,
    PlacedPod,
    place,
    place_gang,
    usage_by_node,
)

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(name="p", gpus=0, cpu=None, memory=None, selector=None, tolerations=None, affinity=None):
    limits = {}
    requests = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    resources = {"limits": limits, "requests": requests}
    spec = {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    if selector:
        spec["nodeSelector"] = selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_node_spec_builds_labelled_tainted_gpu_nodes_and_a_cpu_node():
    nodes = build_nodes("h100-sxm-80gb:2x8,l4-24gb:4x1")
    names = [n["metadata"]["name"] for n in nodes]
    assert names[:6] == [
        "gpu-h100-sxm-80gb-0",
        "gpu-h100-sxm-80gb-1",
        "gpu-l4-24gb-0",
        "gpu-l4-24gb-1",
        "gpu-l4-24gb-2",
        "gpu-l4-24gb-3",
    ]
    assert names[6] == "cpu-0"
    h100 = nodes[0]
    assert h100["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert h100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    labels = h100["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert int(labels["nvidia.com/gpu.memory"]) > 80_000
    assert h100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert nodes[2]["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L4"
    # CPU and memory grow with the GPU count.
    l4 = nodes[2]
    cpus = [to_units("cpu", node["status"]["capacity"]["cpu"]) for node in (h100, l4)]
    assert cpus[0] > cpus[1]
    assert "taints" not in nodes[6]["spec"]


def test_amd_nodes_use_the_amd_resource_and_an_explicit_cpu_entry_replaces_the_default():
    nodes = build_nodes("mi300x-192gb:1x8,cpu:2")
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-mi300x-192gb-0", "cpu-0", "cpu-1"]
    assert nodes[0]["status"]["allocatable"]["amd.com/gpu"] == "8"
    assert "nvidia.com/gpu" not in nodes[0]["status"]["allocatable"]


@pytest.mark.parametrize("spec", ["h100:1x8", "h100-sxm-80gb:1", "h100-sxm-80gb:x8", "l4-24gb:1x0"])
def test_bad_node_specs_are_refused(spec):
    with pytest.raises(ValueError):
        parse_nodes(spec)


def test_quantities_round_trip_and_limits_default_requests():
    assert to_units("cpu", "500m") == 500
    assert to_units("cpu", "2") == 2000
    assert to_units("memory", "16Gi") == 16 * 1024**3
    assert to_units("memory", "1G") == 10**9
    assert format_units("cpu", 1500) == "1500m"
    assert format_units("memory", 3 * 1024**3) == "3Gi"
    assert pod_requests(pod(gpus=2, cpu="1")) == {"nvidia.com/gpu": 2, "cpu": 1000}


def test_gpu_pod_lands_on_the_only_node_with_enough_gpus():
    nodes = build_nodes("h100-sxm-80gb:1x8,l4-24gb:2x1")
    assert place(pod(gpus=2, tolerations=[GPU_TOLERATION]), nodes, {}) == "gpu-h100-sxm-80gb-0"


def test_no_fit_message_counts_each_reason_like_kube_scheduler():
    nodes = build_nodes("h100-sxm-80gb:2x8,l4-24gb:4x1,cpu:0")
    wants_l4 = pod(gpus=2, selector={"nvidia.com/gpu.product": "NVIDIA-L4"}, tolerations=[GPU_TOLERATION])
    with pytest.raises(FitError) as caught:
        place(wants_l4, nodes, {})
    assert caught.value.message == (
        "0/6 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, "
        "4 Insufficient nvidia.com/gpu. preemption: 0/6 nodes are available: "
        "2 Preemption is not helpful for scheduling, 4 No preemption victims found for incoming pod."
    )


def test_untolerated_gpu_taint_keeps_cpu_pods_off_gpu_nodes():
    nodes = build_nodes("h100-sxm-80gb:1x8,cpu:1")
    assert place(pod(cpu="1"), nodes, {}) == "cpu-0"
    with pytest.raises(FitError) as caught:
        place(pod(cpu="100"), nodes, {})
    assert caught.value.message.startswith(
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_free_capacity_accounts_for_pods_already_bound():
    nodes = build_nodes("h100-sxm-80gb:1x8,cpu:0")
    bound = [
        {**pod(name=f"b{i}", gpus=2), "spec": {**pod(gpus=2)["spec"], "nodeName": "gpu-h100-sxm-80gb-0"}}
        for i in range(4)
    ]
    usage = usage_by_node(bound)
    assert usage["gpu-h100-sxm-80gb-0"].requested["nvidia.com/gpu"] == 8
    with pytest.raises(FitError) as caught:
        place(pod(gpus=1, tolerations=[GPU_TOLERATION]), nodes, usage)
    assert "1 Insufficient nvidia.com/gpu" in caught.value.message


def test_required_node_affinity_expressions_choose_the_node():
    nodes = build_nodes("h100-sxm-80gb:1x8,l4-24gb:1x1,cpu:0")
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}
                        ]
                    },
                ]
            }
        }
    }
    assert place(pod(gpus=1, tolerations=[GPU_TOLERATION], affinity=affinity), nodes, {}) == "gpu-l4-24gb-0"
    more = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}]},
                ]
            }
        }
    }
    assert place(pod(gpus=1, tolerations=[GPU_TOLERATION], affinity=more), nodes, {}) == "gpu-h100-sxm-80gb-0"


def test_gpu_pods_pack_onto_the_fullest_node_that_fits():
    nodes = build_nodes("h100-sxm-80gb:2x8,cpu:0")
    usage = {"gpu-h100-sxm-80gb-1": NodeUsage({"nvidia.com/gpu": 6}, 3)}
    assert place(pod(gpus=2, tolerations=[GPU_TOLERATION]), nodes, usage) == "gpu-h100-sxm-80gb-1"


def test_gang_is_placed_whole_or_not_at_all():
    nodes = build_nodes("h100-sxm-80gb:2x8,cpu:0")
    group = [pod(name=f"g-{i}", gpus=8, tolerations=[GPU_TOLERATION]) for i in range(2)]
    placement = place_gang(group, nodes, {})
    assert sorted(placement.values()) == ["gpu-h100-sxm-80gb-0", "gpu-h100-sxm-80gb-1"]
    too_big = [pod(name=f"g-{i}", gpus=8, tolerations=[GPU_TOLERATION]) for i in range(3)]
    with pytest.raises(FitError):
        place_gang(too_big, nodes, {})


def test_extended_resource_toleration_admission_adds_the_gpu_toleration_once():
    assert extended_resource_tolerations(pod(gpus=1)) == [GPU_TOLERATION]
    assert extended_resource_tolerations(pod(gpus=1, tolerations=[GPU_TOLERATION])) == []
    assert extended_resource_tolerations(pod(cpu="1")) == []


def labelled(name, labels, **kwargs):
    body = pod(name=name, **kwargs)
    body["metadata"]["labels"] = labels
    return body


def anti_affinity(app, key="kubernetes.io/hostname"):
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
            ]
        }
    }


def test_required_pod_anti_affinity_spreads_replicas_one_per_node():
    nodes = build_nodes("l4-24gb:2x1,cpu:0")
    placed = []
    chosen = []
    for index in range(2):
        replica = labelled(
            f"r{index}", {"app": "engine"}, tolerations=[GPU_TOLERATION], affinity=anti_affinity("engine")
        )
        chosen.append(place(replica, nodes, {}, placed))
        placed.append(PlacedPod(chosen[-1], "default", {"app": "engine"}))
    assert sorted(chosen) == ["gpu-l4-24gb-0", "gpu-l4-24gb-1"]
    third = labelled("r2", {"app": "engine"}, tolerations=[GPU_TOLERATION], affinity=anti_affinity("engine"))
    with pytest.raises(FitError) as caught:
        place(third, nodes, {}, placed)
    assert caught.value.message.startswith("0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")


def test_required_pod_affinity_follows_the_matching_pod_and_lets_the_first_one_in():
    nodes = build_nodes("l4-24gb:2x1,cpu:0")
    together = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"group": "g"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    first = labelled("a", {"group": "g"}, tolerations=[GPU_TOLERATION], affinity=together)
    assert place(first, nodes, {}, []) in ("gpu-l4-24gb-0", "gpu-l4-24gb-1")  # nobody to follow yet
    placed = [PlacedPod("gpu-l4-24gb-1", "default", {"group": "g"})]
    second = labelled("b", {"group": "g"}, tolerations=[GPU_TOLERATION], affinity=together)
    assert place(second, nodes, {}, placed) == "gpu-l4-24gb-1"
    stranger = labelled("c", {"group": "other"}, tolerations=[GPU_TOLERATION], affinity=together)
    with pytest.raises(FitError) as caught:
        place(stranger, nodes, {}, [])
    assert "2 node(s) didn't match pod affinity rules" in caught.value.message


def test_a_gpu_pod_lands_where_scanning_every_node_would_put_it():
    """`place` filters only the tiers of free GPUs a pod could pack into; a scan of every node is the reference."""
    import random

    from kubesim.cluster.placement import place_scanning

    rng = random.Random(11)
    nodes = build_nodes("h100-sxm-80gb:12x8,a100-sxm-80gb:6x4,l4-24gb:8x1,cpu:3")
    for node in nodes:
        if rng.random() < 0.15:
            node["spec"]["unschedulable"] = True
    names = [n["metadata"]["name"] for n in nodes]
    usage: dict[str, NodeUsage] = {}
    placed_some = refused = 0
    for i in range(600):
        gpus = rng.choice([1, 1, 2, 4, 8])
        selector = rng.choice([None, None, {"nvidia.com/gpu.product": "NVIDIA-L4"}])
        candidate = pod(f"p{i}", gpus=gpus, cpu=rng.choice([None, "2", "30"]), selector=selector,
                        tolerations=rng.choice([[GPU_TOLERATION]] * 4 + [[]]))
        try:
            expected = place_scanning(candidate, nodes, usage, pod_requests(candidate), None, {})
        except FitError as error:
            with pytest.raises(FitError) as caught:
                place(candidate, nodes, usage)
            assert caught.value.message == error.message
            refused += 1
            continue
        assert place(candidate, nodes, usage) == expected
        placed_some += 1
        if rng.random() < 0.7:  # bind it, and now and then free a node, so the tiers keep changing
            usage[expected] = (usage.get(expected) or NodeUsage()).plus(pod_requests(candidate))
        if rng.random() < 0.3:
            usage.pop(rng.choice(names), None)
    assert placed_some > 100 and refused > 50  # both outcomes, many times
