"""The API server's pod and service proxies (and the routing-policy hook), through the official client."""

import json
import time

import requests

from tests.kubesim.cluster_support import deployment, is_ready, pod_manifest
from tests.polling import wait_for

NS = "default"



def web_service(name: str = "web", annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }


def test_pod_proxy_reaches_the_workload(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(NS, pod_manifest("web"))
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("web", NS)), message="Ready")
    assert cluster.core.connect_get_namespaced_pod_proxy_with_path("web:8080", NS, "health") == "ok"
    # Any method, query and body go through unchanged.
    url = f"{cluster.url}/api/v1/namespaces/{NS}/pods/web:8080/proxy/v1/echo"
    answer = requests.post(url, params={"q": "1"}, data=b'{"prompt":"hi"}', headers={"X-Trace": "abc"}, timeout=10)
    assert answer.status_code == 200
    echoed = answer.json()
    assert (echoed["pod"], echoed["method"], echoed["path"]) == ("web", "POST", "/v1/echo")
    assert echoed["query"] == {"q": "1"}
    assert echoed["body"] == '{"prompt":"hi"}'
    assert echoed["headers"]["X-Trace"] == "abc"


def test_pod_proxy_to_a_pod_that_is_not_running_is_an_apiserver_error(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1,cpu:0")
    cluster.core.create_namespaced_pod(NS, pod_manifest("nowhere"))  # cannot be scheduled
    answer = requests.get(f"{cluster.url}/api/v1/namespaces/{NS}/pods/nowhere/proxy/health", timeout=10)
    assert answer.status_code == 400
    assert answer.json()["message"] == "pod nowhere does not have a host assigned"
    missing = requests.get(f"{cluster.url}/api/v1/namespaces/{NS}/pods/ghost/proxy/health", timeout=10)
    assert (missing.status_code, missing.json()["reason"]) == (404, "NotFound")


def test_service_proxy_streams_server_sent_events_chunk_by_chunk(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=1))
    cluster.core.create_namespaced_service(NS, web_service())
    wait_for(lambda: any(s.addresses for s in cluster.core.read_namespaced_endpoints("web", NS).subsets or []),
             message="a ready endpoint")
    response = cluster.core.connect_get_namespaced_service_proxy_with_path(
        "web:http", NS, "stream", _preload_content=False
    )
    arrivals = []
    events = []
    for chunk in response.stream(decode_content=False):
        arrivals.append(time.monotonic())
        events.extend(line for line in chunk.decode().split("\n") if line.startswith("data: "))
    assert events[-1] == "data: [DONE]"
    assert [json.loads(e[6:])["index"] for e in events[:-1]] == [0, 1, 2, 3, 4]
    # The workload writes one event every 0.2 s: streamed, they arrive spread out, not in one piece.
    assert len(arrivals) >= 5
    assert arrivals[-1] - arrivals[0] >= 0.6


def test_service_proxy_balances_round_robin_over_ready_endpoints(make_cluster):
    cluster = make_cluster()
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=3))
    cluster.core.create_namespaced_service(NS, web_service())
    wait_for(
        lambda: sum(is_ready(p) for p in cluster.core.list_namespaced_pod(NS, label_selector="app=web").items) == 3,
        message="three Ready pods",
    )
    url = f"{cluster.url}/api/v1/namespaces/{NS}/services/web:80/proxy/whoami"
    seen = [requests.get(url, timeout=10).json()["pod"] for _ in range(6)]
    assert len(set(seen)) == 3
    assert seen[:3] == seen[3:]


def test_a_routing_policy_named_by_annotation_picks_the_endpoint(make_cluster):
    calls = []

    def last_endpoint(request, endpoints):
        calls.append((request.method, request.path, request.body))
        return sorted(endpoints, key=lambda e: e.pod_name)[-1]

    cluster = make_cluster(routing_policies={"test-last": last_endpoint})
    cluster.apps.create_namespaced_deployment(NS, deployment("web", replicas=2))
    cluster.core.create_namespaced_service(NS, web_service(annotations={"kubesim.io/routing-policy": "test-last"}))
    pods = wait_for(
        lambda: (
            (ps := [p for p in cluster.core.list_namespaced_pod(NS, label_selector="app=web").items if is_ready(p)])
            and len(ps) == 2
            and ps
        ),
        message="two Ready pods",
    )
    url = f"{cluster.url}/api/v1/namespaces/{NS}/services/web/proxy/v1/completions"
    seen = {requests.post(url, data=b"prompt", timeout=10).json()["pod"] for _ in range(4)}
    assert seen == {max(p.metadata.name for p in pods)}
    assert calls[0] == ("POST", "/v1/completions", b"prompt")


def test_service_without_ready_endpoints_answers_503(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_service(NS, web_service())
    answer = requests.get(f"{cluster.url}/api/v1/namespaces/{NS}/services/web:80/proxy/health", timeout=10)
    assert answer.status_code == 503
    assert answer.json()["message"] == 'no endpoints available for service "web"'
