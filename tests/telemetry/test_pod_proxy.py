"""The scraper's GET through the pod proxy is the request the official client's generated method sends
(same path, headers, auth; the same exception for a non-2xx answer), and the collector is held off only
for the duration of a cycle."""

from __future__ import annotations

import gc
import json
from contextlib import contextmanager

import pytest
from kubernetes.client.exceptions import ApiException

from apps.clusters.models import ClusterCredentials
from apps.telemetry.scrape import ACCEPT
from tests.telemetry.servers import serving_app
from workers.enginepods import EnginePod, proxy_get
from workers.kube import Kube
from workers.telemetry import collector_held_off

POD = EnginePod(service_id=1, namespace="tenant-acme", name="chat-7d9f-x2k4q", role="engine", node="gpu-0",
                port=8000, ready=True)
STATUS = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "ServiceUnavailable",
          "message": "error trying to reach service: dial tcp 10.0.0.7:8000: connect: connection refused", "code": 503}


@contextmanager
def api_server(status: int, body: bytes, content_type: str):
    """Answers every GET with `status` and `body`; yields (URL, the requests seen as (path, headers))."""
    seen: list = []
    with serving_app(lambda path, query: (status, content_type, body.decode()), headers_seen=seen) as (url, _):
        yield url, seen


def kube(url: str) -> Kube:
    return Kube(ClusterCredentials(api_url=url, bearer_token="t0ken", kubeconfig="", ca_bundle="", verify_tls=False))


def generated(core, pod):
    """The oracle: the official client's generated method, as the scraper called it before."""
    return core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod.name}:{pod.port}", pod.namespace, "metrics",
        _preload_content=False, _request_timeout=(2.0, 2.0), _headers={"Accept": ACCEPT},
    )


def test_the_proxied_get_is_the_request_the_generated_method_sends():
    with api_server(200, b"vllm:num_requests_running 1\n", "text/plain") as (url, seen), kube(url) as k:
        expected = generated(k.core, POD)
        expected_body = expected.read()
        expected.release_conn()
        response = proxy_get(k.core, POD, "metrics", 2.0)
        body = response.read()
        response.release_conn()
    assert body == expected_body == b"vllm:num_requests_running 1\n"
    (oracle_path, oracle_headers), (path, headers) = seen
    assert path == oracle_path
    assert path.startswith("/api/v1/namespaces/tenant-acme/pods/chat-7d9f-x2k4q")
    assert path.endswith("/proxy/metrics")
    for name in ("Accept", "Authorization", "User-Agent"):
        assert headers.get(name) == oracle_headers.get(name), name
    assert headers.get("Authorization") == "Bearer t0ken"


@pytest.mark.parametrize("status", [404, 503])
def test_a_non_2xx_answer_raises_what_the_generated_method_raises(status):
    body = json.dumps({**STATUS, "code": status}).encode()
    with api_server(status, body, "application/json") as (url, _), kube(url) as k:
        with pytest.raises(ApiException) as oracle:
            generated(k.core, POD)
        with pytest.raises(ApiException) as raised:
            proxy_get(k.core, POD, "metrics", 2.0)
    assert type(raised.value) is type(oracle.value)
    assert (raised.value.status, raised.value.reason, raised.value.body) == (
        oracle.value.status, oracle.value.reason, oracle.value.body)
    assert raised.value.status == status


def test_the_collector_is_held_off_for_a_block_and_restored_after():
    assert gc.isenabled()
    with collector_held_off():
        assert not gc.isenabled()
        with collector_held_off():  # nested (or another thread's cycle): still off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_held_off():
        raise RuntimeError("a failed cycle")
    assert gc.isenabled()
    # A collector that was off before stays off.
    gc.disable()
    try:
        with collector_held_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
