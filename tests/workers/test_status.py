"""How live objects are read back into pools, reasons and advice (pure functions, no cluster)."""

from workers import status as st


def pod(name, role="engine", phase="Running", ready=True, node="gpu-0", waiting=None, gpus=1, message=""):
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if waiting:
        status["containerStatuses"] = [{"restartCount": 3, "state": {"waiting": {"reason": waiting, "message": message}}}]
    if phase == "Pending" and not node:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": message})
    return {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/component": role}},
        "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": status,
    }


def deployment(role, ready, updated, generation=2, observed=2):
    return {"kind": "Deployment", "metadata": {"labels": {"app.kubernetes.io/component": role}, "generation": generation},
            "status": {"readyReplicas": ready, "updatedReplicas": updated, "observedGeneration": observed}}


def test_pools_are_ready_only_when_every_replica_is_ready_and_updated():
    view = st.service_view({"prefill": 1, "decode": 2}, [deployment("prefill", 1, 1), deployment("decode", 2, 1)], [], [])
    assert view.pools["prefill"].ready == 1
    assert view.pools["decode"].updated == 1
    assert not view.all_ready
    view = st.service_view({"prefill": 1, "decode": 2}, [deployment("prefill", 1, 1), deployment("decode", 2, 2)], [], [])
    assert view.all_ready
    assert view.ready_replicas == 3


def test_a_deployment_whose_controller_lags_the_spec_counts_no_updated_replicas():
    view = st.service_view({"engine": 1}, [deployment("engine", 1, 1, generation=3, observed=2)], [], [])
    assert view.pools["engine"].updated == 0
    assert not view.all_ready


def test_unschedulable_and_crashing_pods_are_named_with_their_reasons():
    msg = "0/6 nodes are available: 4 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
    pods = [pod("a", phase="Pending", ready=False, node="", message=msg),
            pod("b", ready=False, waiting="CrashLoopBackOff", message="back-off 40s restarting failed container")]
    view = st.service_view({"engine": 2}, [deployment("engine", 0, 2)], pods, [])
    assert view.unschedulable == [f"a: {msg}"]
    assert view.crashing == ["b: CrashLoopBackOff (back-off 40s restarting failed container)"]
    assert [p.restarts for p in view.pods] == [0, 3]


def test_gpu_advice_counts_nodes_of_the_product_with_enough_free_gpus():
    nodes = [
        {"name": "l4-0", "gpu_product": "NVIDIA-L4", "allocatable": 1, "allocated": 0},
        {"name": "l4-1", "gpu_product": "NVIDIA-L4", "allocatable": 1, "allocated": 1},
        {"name": "h100-0", "gpu_product": "NVIDIA-H100-80GB-HBM3", "allocatable": 8, "allocated": 6},
    ]
    assert st.gpu_advice(2, "NVIDIA-L4", nodes) == "needs 2 × NVIDIA-L4 per replica; 0 of 2 NVIDIA-L4 nodes have 2 free"
    assert st.gpu_advice(2, "NVIDIA-H100-80GB-HBM3", nodes).endswith("1 of 1 NVIDIA-H100-80GB-HBM3 nodes have 2 free")
    assert st.gpu_advice(1, "NVIDIA-B200", nodes) == "needs 1 × NVIDIA-B200 per replica; the cluster has no NVIDIA-B200 nodes"


def test_a_condition_keeps_its_transition_time_until_its_status_flips():
    first = st.condition("Available", False, "ReplicasNotReady", "engine 0/1")
    first["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    same = st.condition("Available", False, "ReplicasNotReady", "engine 0/1", [first])
    flipped = st.condition("Available", True, "AllReplicasReady", "engine 1/1", [first])
    assert same["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert flipped["lastTransitionTime"] != "2026-01-01T00:00:00Z"


def test_only_events_of_the_services_own_pods_workloads_and_replicasets_are_kept():
    def event(kind, name, message):
        return {"involvedObject": {"kind": kind, "name": name}, "message": message, "lastTimestamp": message}

    events = [
        event("Deployment", "chat", "1 scaled up"),
        event("ReplicaSet", "chat-7cvcb67b4w", "2 created pod"),
        event("Pod", "chat-7cvcb67b4w-q7rcl", "3 pulled"),
        event("Deployment", "chat-router", "4 other service's router"),
        event("ReplicaSet", "chat-router-5d8f9", "5 other service's replicaset"),
        event("Deployment", "other", "6 unrelated"),
    ]
    view = st.service_view({"engine": 1}, [{"kind": "Deployment", "metadata": {"name": "chat",
                                          "labels": {"app.kubernetes.io/component": "engine"}}}],
                           [pod("chat-7cvcb67b4w-q7rcl")], events)
    assert [e["message"] for e in view.events] == ["1 scaled up", "2 created pod", "3 pulled"]
