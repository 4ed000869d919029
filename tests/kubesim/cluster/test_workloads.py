"""Workload controllers seen through the official client and kubectl: Deployment rollouts and status,
scaling, StatefulSet, Endpoints, ResourceQuota, disruption budgets, HPA and garbage collection (LeaderWorkerSet:
test_leaderworkerset.py)."""

import json
import threading

import pytest
import requests
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.kubesim.cluster_support import deployment, events_for, is_ready, pod_manifest, service_of
from tests.polling import wait_for

NS = "default"


def ready_pods(cluster, selector: str) -> list:
    return [p for p in cluster.core.list_namespaced_pod(NS, label_selector=selector).items if is_ready(p)]


def test_deployment_status_reports_a_complete_rollout(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=3))
    status = wait_for(
        lambda: (s := cluster.apps.read_namespaced_deployment_status("web", NS).status).available_replicas == 3 and s,
        message="three available replicas",
    )
    assert (status.replicas, status.ready_replicas, status.updated_replicas, status.observed_generation) == (3, 3, 3, 1)
    conditions = {c.type: (c.status, c.reason) for c in status.conditions}
    assert conditions == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }
    replicasets = cluster.apps.list_namespaced_replica_set(NS, label_selector="app=web").items
    assert len(replicasets) == 1
    assert replicasets[0].metadata.owner_references[0].kind == "Deployment"
    pod_hash = replicasets[0].metadata.labels["pod-template-hash"]
    assert all(p.metadata.labels["pod-template-hash"] == pod_hash for p in ready_pods(cluster, "app=web"))


def test_rolling_update_with_max_unavailable_zero_never_drops_below_desired_ready(make_cluster):
    cluster = make_cluster()
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=3, strategy=strategy))
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 3, message="three Ready pods")

    # Follow every pod change from now on and record the Ready count after each one.
    start_rv = cluster.core.list_namespaced_pod(NS).metadata.resource_version
    ready_counts: list[int] = []
    pod_counts: list[int] = []
    done = threading.Event()

    def follow():
        ready: dict[str, bool] = {p.metadata.name: True for p in ready_pods(cluster, "app=web")}
        stream = watch.Watch()
        for event in stream.stream(
            cluster.core.list_namespaced_pod,
            NS,
            label_selector="app=web",
            resource_version=start_rv,
            timeout_seconds=20,
        ):
            pod = event["object"]
            if event["type"] == "DELETED":
                ready.pop(pod.metadata.name, None)
            else:
                ready[pod.metadata.name] = is_ready(pod)
            ready_counts.append(sum(ready.values()))
            pod_counts.append(len(ready))
            if done.is_set():
                stream.stop()

    follower = threading.Thread(target=follow)
    follower.start()
    patch = {"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}}
    cluster.apps.patch_namespaced_deployment("web", NS, patch)

    def rolled_out():
        status = cluster.apps.read_namespaced_deployment_status("web", NS).status
        pods = cluster.core.list_namespaced_pod(NS, label_selector="app=web").items
        return (
            status.observed_generation == 2
            and status.updated_replicas == 3
            and status.available_replicas == 3
            and status.replicas == 3
            and len(pods) == 3
        )

    wait_for(rolled_out, timeout=30, message="rollout complete")
    done.set()  # and one more change, so that the follower sees it and stops
    some_pod = cluster.core.list_namespaced_pod(NS, label_selector="app=web").items[0].metadata.name
    cluster.core.patch_namespaced_pod(some_pod, NS, {"metadata": {"annotations": {"seen": "yes"}}})
    follower.join(25)
    assert len(ready_counts) >= 6  # three new pods came and three old ones went
    assert min(ready_counts) >= 3
    assert max(pod_counts) == 4  # maxSurge 1: never more than one pod above the three desired
    replicasets = cluster.apps.list_namespaced_replica_set(NS, label_selector="app=web").items
    assert sorted(rs.spec.replicas for rs in replicasets) == [0, 3]
    assert {rs.metadata.annotations["deployment.kubernetes.io/revision"] for rs in replicasets} == {"1", "2"}
    scaling = events_for(cluster.core, NS, "web", "ScalingReplicaSet")
    assert any("Scaled down replica set" in e.message for e in scaling)


def test_scale_through_the_scale_subresource_and_kubectl(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=1))
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 1, message="one Ready pod")
    cluster.apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 4}})
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 4, message="four Ready pods")
    scale = cluster.apps.read_namespaced_deployment_scale("web", NS)
    assert (scale.spec.replicas, scale.status.replicas) == (4, 4)
    cluster.kubectl("scale", "deployment/web", "--replicas=2", "-n", NS)
    wait_for(
        lambda: len(cluster.core.list_namespaced_pod(NS, label_selector="app=web").items) == 2,
        message="two pods after kubectl scale",
    )
    wait_for(
        lambda: cluster.apps.read_namespaced_deployment("web", NS).status.ready_replicas == 2, message="status follows"
    )


def test_statefulset_creates_ordinals_in_order(make_cluster):
    cluster = make_cluster()
    labels = {"app": "db"}
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "db", "image": "postgres:17"}]},
            },
        },
    }
    cluster.apps.create_namespaced_stateful_set(NS, body)
    wait_for(
        lambda: cluster.apps.read_namespaced_stateful_set("db", NS).status.ready_replicas == 3, message="three ready"
    )
    pods = sorted(
        cluster.core.list_namespaced_pod(NS, label_selector="app=db").items, key=lambda p: p.metadata.creation_timestamp
    )
    assert sorted(p.metadata.name for p in pods) == ["db-0", "db-1", "db-2"]
    ready_times = {
        p.metadata.name: next(c.last_transition_time for c in p.status.conditions if c.type == "Ready") for p in pods
    }
    created = {p.metadata.name: p.metadata.creation_timestamp for p in pods}
    assert created["db-1"] >= ready_times["db-0"] and created["db-2"] >= ready_times["db-1"]
    cluster.apps.patch_namespaced_stateful_set_scale("db", NS, {"spec": {"replicas": 1}})
    wait_for(
        lambda: (
            [p.metadata.name for p in cluster.core.list_namespaced_pod(NS, label_selector="app=db").items] == ["db-0"]
        ),
        message="scaled down to db-0",
    )


def test_endpoints_list_ready_pods_of_a_service(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=2))
    cluster.core.create_namespaced_service(NS, service_of("web", [{"name": "http", "port": 80, "targetPort": "http"}]))
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 2, message="pods Ready")

    def addresses():
        subsets = cluster.core.read_namespaced_endpoints("web", NS).subsets or []
        return sorted(a.ip for s in subsets for a in s.addresses or [])

    expected = sorted(p.status.pod_ip for p in ready_pods(cluster, "app=web"))
    wait_for(lambda: addresses() == expected, message="endpoints match the Ready pods")
    subset = cluster.core.read_namespaced_endpoints("web", NS).subsets[0]
    assert [(p.name, p.port) for p in subset.ports] == [("http", 8080)]
    cluster.apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 1}})
    wait_for(lambda: len(addresses()) == 1, message="endpoints shrink with the Deployment")


def test_gpu_quota_rejects_pods_beyond_it_with_the_apiservers_words(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_resource_quota(
        NS,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu-quota"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2", "limits.nvidia.com/gpu": "2"}},
        },
    )
    cluster.core.create_namespaced_pod(NS, pod_manifest("first", gpus=2))
    with pytest.raises(ApiException) as caught:
        cluster.core.create_namespaced_pod(NS, pod_manifest("second", gpus=1))
    assert caught.value.status == 403
    body = json.loads(caught.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "second" is forbidden: exceeded quota: gpu-quota, '
        "requested: limits.nvidia.com/gpu=1,requests.nvidia.com/gpu=1, "
        "used: limits.nvidia.com/gpu=2,requests.nvidia.com/gpu=2, "
        "limited: limits.nvidia.com/gpu=2,requests.nvidia.com/gpu=2"
    )
    quota = wait_for(
        lambda: (q := cluster.core.read_namespaced_resource_quota("gpu-quota", NS)).status and q.status.used and q,
        message="quota status",
    )
    assert quota.status.used == {"limits.nvidia.com/gpu": "2", "requests.nvidia.com/gpu": "2"}
    # A Deployment over quota reports why its pods are missing.
    cluster.apps.create_namespaced_deployment(NS, deployment("llm", replicas=1, gpus=1))
    condition = wait_for(
        lambda: next(
            (
                c
                for c in cluster.apps.read_namespaced_deployment_status("llm", NS).status.conditions or []
                if c.type == "ReplicaFailure"
            ),
            None,
        ),
        message="ReplicaFailure condition",
    )
    assert condition.reason == "FailedCreate"
    assert "exceeded quota: gpu-quota" in condition.message


def test_deleting_a_deployment_collects_its_replicasets_and_pods(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=2))
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 2, message="pods Ready")
    cluster.apps.delete_namespaced_deployment("web", NS, body=client.V1DeleteOptions(propagation_policy="Background"))
    wait_for(
        lambda: (
            not cluster.apps.list_namespaced_replica_set(NS).items
            and not cluster.core.list_namespaced_pod(NS, label_selector="app=web").items
        ),
        message="all collected",
    )


def test_recreate_strategy_removes_old_pods_before_starting_new_ones(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=2, strategy={"type": "Recreate"}))
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 2, message="two Ready pods")
    old = {p.metadata.name for p in ready_pods(cluster, "app=web")}
    start_rv = cluster.core.list_namespaced_pod(NS).metadata.resource_version
    cluster.apps.patch_namespaced_deployment("web", NS, {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})
    new = wait_for(
        lambda: (
            (ps := ready_pods(cluster, "app=web")) and len(ps) == 2 and not {p.metadata.name for p in ps} & old and ps
        ),
        message="two new Ready pods",
    )
    assert all(p.metadata.labels["v"] == "2" for p in new)
    # Replay the changes: no new pod was added while an old one still existed.
    alive = set(old)
    for event in watch.Watch().stream(
        cluster.core.list_namespaced_pod, NS, resource_version=start_rv, timeout_seconds=1
    ):
        name = event["object"].metadata.name
        if event["type"] == "DELETED":
            alive.discard(name)
        elif event["type"] == "ADDED":
            assert not alive & old, f"{name} was created while {alive & old} still ran"
            alive.add(name)


def test_a_rollout_that_cannot_progress_reports_progress_deadline_exceeded(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1")
    body = deployment("too-big", replicas=1, gpus=4)  # no node has four GPUs
    body["spec"]["progressDeadlineSeconds"] = 1
    cluster.apps.create_namespaced_deployment(NS, body)

    def progressing():
        conditions = cluster.apps.read_namespaced_deployment_status("too-big", NS).status.conditions or []
        return next((c for c in conditions if c.type == "Progressing" and c.status == "False"), None)

    condition = wait_for(progressing, timeout=10, message="ProgressDeadlineExceeded")
    assert condition.reason == "ProgressDeadlineExceeded"
    assert condition.message.endswith("has timed out progressing.")
    available = next(
        c
        for c in cluster.apps.read_namespaced_deployment_status("too-big", NS).status.conditions
        if c.type == "Available"
    )
    assert (available.status, available.reason) == ("False", "MinimumReplicasUnavailable")


def test_pod_disruption_budget_status_follows_the_ready_pods(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=3))
    client.PolicyV1Api(cluster.api_client).create_namespaced_pod_disruption_budget(
        NS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"maxUnavailable": "34%", "selector": {"matchLabels": {"app": "web"}}},
        },
    )

    def status():
        return client.PolicyV1Api(cluster.api_client).read_namespaced_pod_disruption_budget_status("web", NS).status

    settled = wait_for(lambda: (s := status()) and s.current_healthy == 3 and s, message="three healthy pods")
    # 34% of 3 rounds down to 1 unavailable pod: 2 must stay healthy, so 1 disruption is allowed.
    assert (settled.expected_pods, settled.desired_healthy, settled.disruptions_allowed) == (3, 2, 1)
    assert [(c.type, c.status) for c in settled.conditions] == [("DisruptionAllowed", "True")]


def hpa(metrics: list[dict], min_replicas: int = 1, max_replicas: int = 6) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": metrics,
        },
    }


def test_hpa_scales_a_deployment_on_a_pods_metric_scraped_from_its_pods(make_cluster):
    cluster = make_cluster()
    autoscaling = client.AutoscalingV2Api(cluster.api_client)
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=1))
    cluster.core.create_namespaced_service(NS, service_of("web", [{"port": 80, "targetPort": 8080}]))
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 1, message="one Ready pod")
    in_flight = {
        "type": "Pods",
        "pods": {
            "metric": {"name": "http_requests_in_flight"},
            "target": {"type": "AverageValue", "averageValue": "2"},
        },
    }
    autoscaling.create_namespaced_horizontal_pod_autoscaler(NS, hpa([in_flight]))
    # Eight slow streams in flight on the one pod: 8 / 2 per pod = 4 replicas.
    url = f"{cluster.url}/api/v1/namespaces/{NS}/services/web/proxy/stream?n=40&interval=0.1"
    streams = [requests.get(url, stream=True, timeout=30) for _ in range(8)]
    try:
        status = wait_for(
            lambda: (
                (s := autoscaling.read_namespaced_horizontal_pod_autoscaler_status("web", NS).status).desired_replicas
                == 4
                and s
            ),
            message="desired replicas 4",
        )
        # 8 in flight / target 2 per pod = 4: the exact size shows the scraped value was used.
        assert status.current_metrics[0].pods.metric.name == "http_requests_in_flight"
        assert {c.type: c.status for c in status.conditions}["ScalingActive"] == "True"
        wait_for(lambda: cluster.apps.read_namespaced_deployment("web", NS).spec.replicas == 4, message="scaled")
        rescale = events_for(cluster.core, NS, "web", "SuccessfulRescale")
        assert "New size: 4; reason: pods metric http_requests_in_flight above target" in {e.message for e in rescale}
    finally:
        for stream in streams:
            stream.close()


def test_hpa_on_cpu_without_a_metrics_server_only_enforces_its_bounds(make_cluster):
    cluster = make_cluster()
    autoscaling = client.AutoscalingV2Api(cluster.api_client)
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=1))
    cpu = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}
    autoscaling.create_namespaced_horizontal_pod_autoscaler(NS, hpa([cpu], min_replicas=2))
    wait_for(lambda: cluster.apps.read_namespaced_deployment("web", NS).spec.replicas == 2, message="raised to min")

    def scaling_active():
        status = autoscaling.read_namespaced_horizontal_pod_autoscaler_status("web", NS).status
        return next((c for c in status.conditions or [] if c.type == "ScalingActive"), None)

    condition = wait_for(scaling_active, message="ScalingActive condition")
    assert (condition.status, condition.reason) == ("False", "FailedGetResourceMetric")


def test_eviction_honours_the_pod_disruption_budget(make_cluster):
    cluster = make_cluster()
    policy = client.PolicyV1Api(cluster.api_client)
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=2))
    policy.create_namespaced_pod_disruption_budget(
        NS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 2, message="two Ready pods")
    victim = ready_pods(cluster, "app=web")[0].metadata.name
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": NS}}
    with pytest.raises(ApiException) as caught:
        cluster.core.create_namespaced_pod_eviction(victim, NS, eviction)
    assert caught.value.status == 429
    body = json.loads(caught.value.body)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert (
        body["details"]["causes"][0]["message"] == "The disruption budget web needs 2 healthy pods and has 2 currently"
    )
    policy.patch_namespaced_pod_disruption_budget("web", NS, {"spec": {"minAvailable": 1}})
    cluster.core.create_namespaced_pod_eviction(victim, NS, eviction)
    wait_for(
        lambda: victim not in {p.metadata.name for p in cluster.core.list_namespaced_pod(NS).items}, message="gone"
    )
    wait_for(lambda: len(ready_pods(cluster, "app=web")) == 2, message="replaced")
