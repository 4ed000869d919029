"""Scheduling on simulated GPU nodes, seen through the official client: placement, the scheduler's
FailedScheduling wording, selectors and tolerations, and LeaderWorkerSet gang placement."""

from kubernetes import client

from tests.kubesim.cluster_support import (
    GPU_TOLERATION,
    deployment,
    events_for,
    is_ready,
    only_ready_pod,
    pod_manifest,
    replacement_of,
)
from tests.polling import wait_for

NS = "default"



def test_nodes_show_gpus_labels_and_taints(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8,l4-24gb:2x1")
    nodes = {n.metadata.name: n for n in cluster.core.list_node().items}
    assert set(nodes) == {"gpu-h100-sxm-80gb-0", "gpu-l4-24gb-0", "gpu-l4-24gb-1", "cpu-0"}
    h100 = nodes["gpu-h100-sxm-80gb-0"]
    assert h100.status.capacity["nvidia.com/gpu"] == "8"
    assert h100.status.allocatable["nvidia.com/gpu"] == "8"
    assert h100.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert [(t.key, t.value, t.effect) for t in h100.spec.taints] == [("nvidia.com/gpu", "present", "NoSchedule")]
    assert all(c.status == "True" for c in h100.status.conditions if c.type == "Ready")
    assert nodes["gpu-l4-24gb-1"].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    out = cluster.kubectl(
        "get", "nodes", "-o", "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu"
    )
    assert "gpu-h100-sxm-80gb-0   8" in out.stdout


def test_gpu_deployment_lands_on_h100_and_the_extra_replica_stays_pending(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8,l4-24gb:2x1")
    cluster.apps.create_namespaced_deployment(NS, deployment("llm", replicas=1, gpus=2))

    def pods():
        return cluster.core.list_namespaced_pod(NS, label_selector="app=llm").items

    wait_for(lambda: len(pods()) == 1 and is_ready(pods()[0]), message="the first replica Ready")
    assert pods()[0].spec.node_name == "gpu-h100-sxm-80gb-0"
    # The GPU request alone adds the toleration (ExtendedResourceToleration admission).
    assert any(t.key == "nvidia.com/gpu" and t.operator == "Exists" for t in pods()[0].spec.tolerations)

    cluster.apps.patch_namespaced_deployment_scale("llm", NS, {"spec": {"replicas": 5}})
    wait_for(lambda: sum(1 for p in pods() if is_ready(p)) == 4, message="four replicas Ready")
    pending = wait_for(lambda: [p for p in pods() if not p.spec.node_name and p.status.conditions], message="pending")
    assert len(pending) == 1
    assert {p.spec.node_name for p in pods() if p.spec.node_name} == {"gpu-h100-sxm-80gb-0"}
    scheduled = next(c for c in pending[0].status.conditions if c.type == "PodScheduled")
    expected = (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
        "4 No preemption victims found for incoming pod."
    )
    assert (scheduled.status, scheduled.reason, scheduled.message) == ("False", "Unschedulable", expected)
    failed = wait_for(
        lambda: events_for(cluster.core, NS, pending[0].metadata.name, "FailedScheduling"),
        message="FailedScheduling event",
    )
    assert failed[0].type == "Warning"
    assert failed[0].message == expected
    status = cluster.apps.read_namespaced_deployment_status("llm", NS).status
    assert (status.replicas, status.ready_replicas, status.unavailable_replicas) == (5, 4, 1)


def test_message_counts_selector_mismatches_and_insufficient_gpus(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:2x8,l4-24gb:4x1,cpu:0")
    cluster.core.create_namespaced_pod(
        NS, pod_manifest("wants-two-l4", gpus=2, node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"})
    )
    event = wait_for(lambda: events_for(cluster.core, NS, "wants-two-l4", "FailedScheduling"), message="event")[0]
    assert event.message.startswith(
        "0/6 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 4 Insufficient nvidia.com/gpu."
    )
    assert cluster.core.read_namespaced_pod("wants-two-l4", NS).status.phase == "Pending"


def test_taints_keep_untolerating_pods_off_gpu_nodes_and_tolerations_let_them_in(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8,l4-24gb:1x1")
    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    cluster.core.create_namespaced_pod(NS, pod_manifest("plain"))
    cluster.core.create_namespaced_pod(NS, pod_manifest("wants-h100", node_selector=h100))
    cluster.core.create_namespaced_pod(
        NS, pod_manifest("tolerates-h100", node_selector=h100, tolerations=[GPU_TOLERATION])
    )
    wait_for(lambda: cluster.core.read_namespaced_pod("plain", NS).spec.node_name == "cpu-0", message="plain")
    wait_for(
        lambda: cluster.core.read_namespaced_pod("tolerates-h100", NS).spec.node_name == "gpu-h100-sxm-80gb-0",
        message="tolerating pod on the H100 node",
    )
    event = wait_for(lambda: events_for(cluster.core, NS, "wants-h100", "FailedScheduling"), message="event")[0]
    assert event.message.startswith(
        # Taints are checked before selectors: both GPU nodes fail on the taint, the CPU node on the selector.
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_required_node_affinity_is_honoured(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8,l4-24gb:1x1")
    pod = pod_manifest("l4-only", gpus=1)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]}
                ]
            }
        }
    }
    cluster.core.create_namespaced_pod(NS, pod)
    wait_for(
        lambda: cluster.core.read_namespaced_pod("l4-only", NS).spec.node_name == "gpu-l4-24gb-0",
        message="placed on the L4 node",
    )


def lws(name: str, replicas: int, size: int, gpus: int) -> dict:
    template = {
        "spec": {
            "containers": [
                {"name": "engine", "image": "nginx:1.27", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ]
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}},
    }


def test_leaderworkerset_groups_are_placed_all_or_nothing(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:3x8")
    cluster.custom.create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets", lws("big", replicas=2, size=2, gpus=8)
    )

    def group(index):
        return cluster.core.list_namespaced_pod(
            NS, label_selector=f"leaderworkerset.sigs.k8s.io/name=big,leaderworkerset.sigs.k8s.io/group-index={index}"
        ).items

    wait_for(lambda: len(group(0)) == 2 and all(is_ready(p) for p in group(0)), message="group 0 Ready")
    assert len({p.spec.node_name for p in group(0)}) == 2
    # Group 1 needs two whole nodes; one is free. A per-pod scheduler would place one member there.
    wait_for(
        lambda: (
            len(group(1)) == 2
            and all(events_for(cluster.core, NS, p.metadata.name, "FailedScheduling") for p in group(1))
        ),
        message="group 1 FailedScheduling",
    )
    assert [p.spec.node_name for p in group(1)] == [None, None]
    status = cluster.custom.get_namespaced_custom_object_status(
        "leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets", "big"
    )["status"]
    assert (status["replicas"], status["readyReplicas"]) == (2, 1)


def test_deleting_a_pod_frees_its_gpus_for_a_pending_one(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1")
    cluster.core.create_namespaced_pod(NS, pod_manifest("first", gpus=1))
    wait_for(lambda: cluster.core.read_namespaced_pod("first", NS).spec.node_name, message="first bound")
    cluster.core.create_namespaced_pod(NS, pod_manifest("second", gpus=1))
    wait_for(lambda: events_for(cluster.core, NS, "second", "FailedScheduling"), message="second unschedulable")
    cluster.core.delete_namespaced_pod("first", NS, body=client.V1DeleteOptions(grace_period_seconds=0))
    wait_for(
        lambda: cluster.core.read_namespaced_pod("second", NS).spec.node_name == "gpu-l4-24gb-0",
        message="second bound after the first left",
    )


def test_kubectl_drain_cordons_the_node_and_its_pods_move(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1,cpu:0")
    cluster.apps.create_namespaced_deployment(NS, deployment("llm", replicas=1, gpus=1))
    first = wait_for(lambda: only_ready_pod(cluster.core, NS, "app=llm"), message="Ready")
    cluster.kubectl("drain", first.spec.node_name, "--ignore-daemonsets", "--timeout=20s")
    assert cluster.core.read_node(first.spec.node_name).spec.unschedulable is True
    moved = wait_for(lambda: replacement_of(cluster.core, NS, "app=llm", first), message="moved")
    assert moved.spec.node_name != first.spec.node_name


def test_kubectl_drain_evicts_and_so_honours_a_pod_disruption_budget(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1,cpu:0")
    cluster.apps.create_namespaced_deployment(NS, deployment("guarded", replicas=1, gpus=1))
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}
    client.PolicyV1Api(cluster.core.api_client).create_namespaced_pod_disruption_budget(NS, pdb)
    first = wait_for(lambda: only_ready_pod(cluster.core, NS, "app=guarded"), message="Ready")
    drain = cluster.kubectl("drain", first.spec.node_name, "--ignore-daemonsets", "--timeout=3s", check=False)
    assert drain.returncode != 0
    assert "disruption budget" in drain.stderr
    assert cluster.core.read_namespaced_pod(first.metadata.name, NS).metadata.deletion_timestamp is None


def test_pod_anti_affinity_keeps_replicas_on_separate_nodes(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1,cpu:0")
    body = deployment("engine", replicas=3, tolerations=[GPU_TOLERATION])
    body["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "engine"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    cluster.apps.create_namespaced_deployment(NS, body)

    def pods():
        return cluster.core.list_namespaced_pod(NS, label_selector="app=engine").items

    wait_for(lambda: sum(is_ready(p) for p in pods()) == 2, message="two Ready replicas")
    assert sorted(p.spec.node_name for p in pods() if p.spec.node_name) == ["gpu-l4-24gb-0", "gpu-l4-24gb-1"]
    pending = next(p for p in pods() if not p.spec.node_name)
    event = wait_for(lambda: events_for(cluster.core, NS, pending.metadata.name, "FailedScheduling"), message="event")
    assert event[0].message.startswith("0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")
