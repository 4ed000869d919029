"""The simulated kubelet through the official client and kubectl: pod lifecycle and events, logs,
crash loops with back-off, and node failure with rescheduling."""

import asyncio
import json

import pytest
import requests
from kubernetes.client.rest import ApiException

from kubesim.cluster.events import expire_events, now
from tests.kubesim.cluster_support import deployment, events_for, is_ready, only_ready_pod, pod_manifest, replacement_of
from tests.polling import wait_for

NS = "default"



def test_a_pod_goes_through_the_lifecycle_with_an_event_for_each_step(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(NS, pod_manifest("web"))
    pod = wait_for(
        lambda: (p := cluster.core.read_namespaced_pod("web", NS)) and is_ready(p) and p, message="pod Ready"
    )
    assert pod.status.phase == "Running"
    assert pod.status.pod_ip.startswith("10.244.")
    assert pod.status.host_ip
    container = pod.status.container_statuses[0]
    assert (container.ready, container.started, container.restart_count) == (True, True, 0)
    assert container.state.running.started_at is not None
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["PodScheduled"] == conditions["ContainersReady"] == conditions["Ready"] == "True"
    reasons = [
        e.reason
        for e in sorted(
            events_for(cluster.core, NS, "web"),
            key=lambda e: e.metadata.resource_version and int(e.metadata.resource_version),
        )
    ]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    [pulled] = [e for e in events_for(cluster.core, NS, "web") if e.reason == "Pulled"]
    # The kubelet's wording; an engine image is gigabytes, never "0 bytes".
    size = int(pulled.message.split("Image size: ")[1].split(" bytes.")[0])
    assert pulled.message.startswith('Successfully pulled image "nginx:1.27" in ')
    assert 1_000_000_000 < size < 20_000_000_000
    logs = cluster.core.read_namespaced_pod_log("web", NS)
    assert "listening on 127.0.0.1:" in logs
    out = cluster.kubectl("logs", "web", "-n", NS)
    assert "starting nginx:1.27" in out.stdout
    cluster.kubectl("delete", "pod", "web", "-n", NS)
    killing = wait_for(lambda: events_for(cluster.core, NS, "web", "Killing"), message="Killing event")
    assert killing[0].message == "Stopping container app"


def test_a_container_that_exits_crash_loops_with_back_off_and_keeps_its_output(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(
        NS, pod_manifest("crasher", image="busybox:1.36", command=["sh", "-c", "echo loading config; exit 3"])
    )

    def backing_off():
        status = cluster.core.read_namespaced_pod("crasher", NS).status
        statuses = status.container_statuses or []
        waiting = statuses and statuses[0].state.waiting
        return waiting and waiting.reason == "CrashLoopBackOff" and statuses[0]

    container = wait_for(backing_off, message="CrashLoopBackOff")
    assert container.restart_count >= 1
    assert container.last_state.terminated.exit_code == 3
    assert container.last_state.terminated.reason == "Error"
    assert not container.ready
    assert cluster.core.read_namespaced_pod_log("crasher", NS, previous=True) == "loading config\n"
    backoff = wait_for(lambda: events_for(cluster.core, NS, "crasher", "BackOff"), message="BackOff event")
    assert backoff[0].type == "Warning"
    assert backoff[0].message.startswith("Back-off restarting failed container app in pod crasher_default(")
    # It keeps restarting: the next attempt fails again after the back-off.
    wait_for(
        lambda: cluster.core.read_namespaced_pod("crasher", NS).status.container_statuses[0].restart_count >= 2,
        timeout=10,
        message="second restart",
    )


def test_logs_of_a_pod_without_a_node_are_empty_and_of_an_unknown_container_refused(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1,cpu:0")
    cluster.core.create_namespaced_pod(NS, pod_manifest("pending"))  # no toleration: never scheduled
    assert cluster.core.read_namespaced_pod_log("pending", NS) == ""
    with pytest.raises(ApiException) as caught:
        cluster.core.read_namespaced_pod_log("pending", NS, container="sidecar")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == "container sidecar is not valid for pod pending"


def test_a_crash_fault_restarts_the_container_and_counts_the_restart(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(NS, pod_manifest("web"))
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("web", NS)), message="Ready")
    cluster.faults("POST", {"namespace": NS, "pod": "web"}, path="/kubesim/faults/crash")
    pod = wait_for(
        lambda: (
            (p := cluster.core.read_namespaced_pod("web", NS)).status.container_statuses[0].restart_count == 1
            and is_ready(p)
            and p
        ),
        message="restarted and Ready again",
    )
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 1
    assert "simulated crash" in cluster.core.read_namespaced_pod_log("web", NS, previous=True)


def test_a_failed_node_goes_not_ready_and_its_pods_move_elsewhere(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1,cpu:0")
    cluster.apps.create_namespaced_deployment(NS, deployment("llm", replicas=1, gpus=1))
    first = wait_for(lambda: only_ready_pod(cluster.core, NS, "app=llm"), message="the pod Ready")
    failed_node = first.spec.node_name
    other = ({"gpu-l4-24gb-0", "gpu-l4-24gb-1"} - {failed_node}).pop()
    assert cluster.faults("PATCH", {"failed_nodes": [failed_node]})["failed_nodes"] == [failed_node]
    node = cluster.core.read_node(failed_node)
    assert next(c for c in node.status.conditions if c.type == "Ready").status == "Unknown"
    assert {(t.key, t.effect) for t in node.spec.taints} >= {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    moved = wait_for(
        lambda: replacement_of(cluster.core, NS, "app=llm", first), message="a replacement Ready elsewhere"
    )
    assert moved.spec.node_name == other
    assert events_for(cluster.core, NS, first.metadata.name, "TaintManagerEviction")
    cluster.faults("PATCH", {"failed_nodes": []})
    node = cluster.core.read_node(failed_node)
    assert next(c for c in node.status.conditions if c.type == "Ready").status == "True"
    assert not [t for t in node.spec.taints or [] if t.key == "node.kubernetes.io/unreachable"]


def test_a_missing_secret_holds_the_container_until_it_exists(make_cluster):
    cluster = make_cluster()
    pod = pod_manifest("needs-token")
    pod["spec"]["containers"][0]["env"] = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "GREETING", "value": "hello $(HF_TOKEN)"},
        {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    cluster.core.create_namespaced_pod(NS, pod)

    def waiting_reason():
        statuses = cluster.core.read_namespaced_pod("needs-token", NS).status.container_statuses or []
        return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason

    assert wait_for(lambda: waiting_reason() == "CreateContainerConfigError" and waiting_reason())
    failed = wait_for(lambda: events_for(cluster.core, NS, "needs-token", "Failed"), message="Failed event")
    assert failed[0].message == 'Error: secret "hf" not found'
    cluster.core.create_namespaced_secret(
        NS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"}, "data": {"token": "czNjcjN0"}}
    )  # base64 of "s3cr3t"
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("needs-token", NS)), message="Ready once it exists")
    # What the workload was started with (its PodContext), read from the in-process kubelet.
    env = cluster.cluster.kubelet.runtimes[(NS, "needs-token")].containers[0].workload.ctx.env
    assert env["HF_TOKEN"] == "s3cr3t"
    assert env["GREETING"] == "hello s3cr3t"
    assert env["MY_NODE"] == "cpu-0"


def test_events_older_than_the_ttl_are_removed(make_cluster):
    cluster = make_cluster()
    for name, stamp in (("old", "2020-01-01T00:00:00Z"), ("fresh", now())):
        cluster.core.create_namespaced_event(
            NS,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": "x", "namespace": NS},
                "reason": "Test",
                "message": name,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
            },
        )
    api = cluster.cluster.api
    removed = asyncio.run_coroutine_threadsafe(expire_events(api, 3600), cluster.server.loop).result(10)
    assert removed == 1
    assert [e.metadata.name for e in cluster.core.list_namespaced_event(NS).items if e.reason == "Test"] == ["fresh"]


def probed_pod(name: str, probe: str) -> dict:
    pod = pod_manifest(name)
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    pod["spec"]["containers"][0][probe] = {
        "httpGet": {"path": "/health", "port": 8080},
        "periodSeconds": 1,
        "failureThreshold": 2,
    }
    return pod


def set_health(cluster, name: str, code: int) -> None:
    url = f"{cluster.url}/api/v1/namespaces/{NS}/pods/{name}:8080/proxy/health?code={code}"
    requests.put(url, timeout=10)


def test_a_failing_readiness_probe_takes_the_pod_out_of_ready_and_back(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(NS, probed_pod("web", "readinessProbe"))
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("web", NS)), message="Ready")
    set_health(cluster, "web", 503)
    wait_for(lambda: not is_ready(cluster.core.read_namespaced_pod("web", NS)), message="not Ready")
    unhealthy = events_for(cluster.core, NS, "web", "Unhealthy")
    assert unhealthy[0].message == "Readiness probe failed: HTTP probe failed with statuscode: 503"
    pod = cluster.core.read_namespaced_pod("web", NS)
    assert pod.status.phase == "Running" and pod.status.container_statuses[0].restart_count == 0
    set_health(cluster, "web", 200)
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("web", NS)), message="Ready again")


def test_a_failing_liveness_probe_restarts_the_container(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(NS, probed_pod("web", "livenessProbe"))
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("web", NS)), message="Ready")
    set_health(cluster, "web", 500)
    status = wait_for(
        lambda: (
            (s := cluster.core.read_namespaced_pod("web", NS).status.container_statuses[0]).restart_count >= 1 and s
        ),
        message="restarted",
    )
    assert status.last_state.terminated.exit_code == 137
    killing = events_for(cluster.core, NS, "web", "Killing")
    assert killing[0].message == "Container app failed liveness probe, will be restarted"
    # The new container answers 200 again, so it comes back Ready.
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("web", NS)), message="Ready after the restart")
