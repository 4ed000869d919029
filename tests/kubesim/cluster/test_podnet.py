"""`--pod-network loopback`: pods' IPs are loopback addresses where their declared ports answer, so the host
reaches a pod as a client on a real pod network would, and NetworkPolicy is enforced by source address."""

import http.client
import ipaddress
import json

import pytest

from tests.kubesim.cluster_support import is_ready
from tests.polling import wait_for
from tests.ports import free_port

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def pod(name: str, namespace: str, labels: dict, image: str, args: list[str], port: int, gpus: int = 0) -> dict:
    container = {"name": "main", "image": image, "args": args, "ports": [{"containerPort": port, "name": "http"}]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [container]}}


def ready_ip(core, namespace: str, name: str) -> str:
    wait_for(lambda: is_ready(core.read_namespaced_pod(name, namespace)), message=f"{name} Ready")
    return core.read_namespaced_pod(name, namespace).status.pod_ip


def get(ip: str, port: int, path: str, source: str | None = None) -> tuple[int, bytes] | None:
    """GET over a direct connection (optionally from `source`); None when the connection is dropped."""
    conn = http.client.HTTPConnection(ip, port, timeout=5, source_address=(source, 0) if source else None)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except (http.client.RemoteDisconnected, ConnectionError):
        return None
    finally:
        conn.close()


def test_an_engine_pod_answers_on_its_own_address(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8", pod_network="loopback")
    cluster.core.create_namespaced_pod("default", pod("vllm", "default", {"app": "vllm"}, "vllm/vllm-openai:v0.8.5",
                                                       ["--model", MODEL, "--port", "8000"], 8000, gpus=1))
    ip = ready_ip(cluster.core, "default", "vllm")
    assert ipaddress.ip_address(ip).is_loopback and ip != "127.0.0.1"
    status, body = get(ip, 8000, "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == [MODEL]
    # A port the pod does not declare is not served.
    assert get(ip, 8001, "/v1/models") is None


def test_network_policy_is_enforced_by_source_address(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1", pod_network="loopback")
    core = cluster.core
    for namespace in ("shop", "front", "elsewhere"):
        core.create_namespace({"metadata": {"name": namespace, "labels": {"team": namespace}}})
    core.create_namespaced_pod("shop", pod("web", "shop", {"app": "web"}, "nginx:1.27", [], 8080))
    core.create_namespaced_pod("front", pod("door", "front", {"app": "door"}, "nginx:1.27", [], 8080))
    core.create_namespaced_pod("elsewhere", pod("door", "elsewhere", {"app": "door"}, "nginx:1.27", [], 8080))
    web, door, stranger = (ready_ip(core, ns, name) for ns, name in
                           (("shop", "web"), ("front", "door"), ("elsewhere", "door")))
    # Before any policy, every pod gets through.
    assert get(web, 8080, "/", source=stranger) is not None
    rule = {"from": [{"namespaceSelector": {"matchLabels": {"team": "front"}},
                      "podSelector": {"matchLabels": {"app": "door"}}}], "ports": [{"port": 8080}]}
    cluster.custom.create_namespaced_custom_object(
        "networking.k8s.io", "v1", "shop", "networkpolicies",
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "only-door"},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [rule]}})
    assert get(web, 8080, "/", source=door) is not None
    assert get(web, 8080, "/", source=stranger) is None
    # The host (an address no pod has) is the node, which NetworkPolicy does not filter.
    assert get(web, 8080, "/", source="127.0.0.1") is not None


@pytest.fixture
def own_claim_port(monkeypatch) -> int:
    """Prefix claims on a port of the test's own: the other test processes' clusters claim on 47."""
    from kubesim.cluster import podnet

    port = free_port()
    monkeypatch.setattr(podnet, "_CLAIM", (255, 254, port))
    return port


def test_a_loopback_prefix_reads_the_hosts_listeners_once_and_avoids_them(monkeypatch, own_claim_port):
    # The host's listener table (/proc/net/tcp) has thousands of lines on a busy machine: reading it once per
    # candidate octet made every loopback cluster take seconds to start.
    from kubesim.cluster import podnet

    reads = []

    def listening():
        reads.append(1)
        return set(range(16, 200))  # everything below 200 is someone's

    monkeypatch.setattr(podnet, "_listening_octets", listening)
    monkeypatch.setattr(podnet, "_TAKEN", dict.fromkeys(range(200, 249)))
    assert podnet.pod_prefix(podnet.LOOPBACK) == "127.249"
    podnet.release_prefix("127.249")
    assert len(reads) == 1
    assert podnet.pod_prefix(podnet.OVERLAY) == "10.244" and len(reads) == 1


def test_a_prefix_another_process_claimed_before_its_pods_listen_is_not_given_again(monkeypatch, own_claim_port):
    # Two test processes start loopback clusters at once: neither's pods listen yet, so the host's table shows
    # neither; the claim listener is what keeps them apart (a gateway test once reached another test's engine).
    import socket

    from kubesim.cluster import podnet

    port = own_claim_port
    monkeypatch.setattr(podnet, "_listening_octets", set)
    monkeypatch.setattr(podnet, "_TAKEN", {})
    others = []
    for n in range(16, 249):  # "another process" holds every prefix but 249
        claim = socket.socket()
        claim.bind((f"127.{n}.255.254", port))
        claim.listen(1)
        others.append(claim)
    try:
        assert podnet.pod_prefix(podnet.LOOPBACK) == "127.249"
        with pytest.raises(RuntimeError, match="no free 127"):
            podnet.pod_prefix(podnet.LOOPBACK)
        podnet.release_prefix("127.249")
        assert podnet.pod_prefix(podnet.LOOPBACK) == "127.249"  # given back, it can be claimed again
        podnet.release_prefix("127.249")
    finally:
        for claim in others:
            claim.close()
