"""Injected faults as the official client experiences them: 500/503/429 with Retry-After, latency,
409 conflicts, dropped watches; configured by CLI-equivalent settings and the admin endpoint."""

import json
import time
import urllib.error

import pytest
import requests
import urllib3
from kubernetes import watch
from kubernetes.client.rest import ApiException

from kubesim.cluster.faults import FaultConfig
from tests.kubesim.cluster_support import pod_manifest

NS = "default"



@pytest.mark.parametrize(("code", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")])
def test_the_next_request_fails_with_the_injected_status(make_cluster, code, reason):
    cluster = make_cluster()
    cluster.faults("PATCH", {"error_count": 1, "error_codes": [code], "retry_after_seconds": 2})
    with pytest.raises(ApiException) as caught:
        cluster.core.list_namespaced_pod(NS)
    assert caught.value.status == code
    assert json.loads(caught.value.body)["reason"] == reason
    assert cluster.core.list_namespaced_pod(NS).items == []  # only the next request was hit
    assert requests.get(f"{cluster.url}/kubesim/faults/injected", timeout=10).json() == {"errors": 1, "conflicts": 0}


def test_too_many_requests_carries_retry_after_which_the_client_honours(make_cluster):
    cluster = make_cluster()
    cluster.faults("PATCH", {"error_count": 1, "error_codes": [429], "retry_after_seconds": 1})
    answer = requests.get(f"{cluster.url}/api/v1/nodes", timeout=10)
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["reason"] == "TooManyRequests"
    # The official client (urllib3 underneath) waits Retry-After and tries again.
    cluster.faults("PATCH", {"error_count": 1})
    started = time.monotonic()
    assert len(cluster.core.list_node().items) == 4
    assert time.monotonic() - started >= 1.0
    assert cluster.faults()["error_count"] == 0


def test_an_error_rate_fails_about_that_share_of_requests(make_cluster):
    cluster = make_cluster(faults=FaultConfig(error_rate=0.5, error_codes=[503]))
    failures = 0
    for _ in range(60):
        try:
            cluster.core.list_node()
        except ApiException as error:
            assert error.status == 503
            failures += 1
    assert 15 <= failures <= 45


def test_added_latency_slows_every_api_call(make_cluster):
    cluster = make_cluster()
    cluster.faults("PATCH", {"latency_ms": 300})
    started = time.monotonic()
    cluster.core.list_node()
    assert time.monotonic() - started >= 0.3


def test_injected_conflicts_hit_updates_only(make_cluster):
    cluster = make_cluster()
    cluster.core.create_namespaced_pod(NS, pod_manifest("web"))
    cluster.faults("PATCH", {"conflict_count": 1})
    cluster.core.read_namespaced_pod("web", NS)  # reads are not affected
    with pytest.raises(ApiException) as caught:
        cluster.core.patch_namespaced_pod("web", NS, {"metadata": {"labels": {"a": "b"}}})
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on pods "web": the object has been modified')
    cluster.core.patch_namespaced_pod("web", NS, {"metadata": {"labels": {"a": "b"}}})
    # What was injected is counted, so a test can tell that its faults did hit.
    assert requests.get(f"{cluster.url}/kubesim/faults/injected", timeout=10).json() == {"errors": 0, "conflicts": 1}


def test_watches_are_cut_after_the_configured_time(make_cluster):
    cluster = make_cluster(faults=FaultConfig(watch_drop_seconds=0.5))
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):
        for _event in watch.Watch().stream(cluster.core.list_namespaced_pod, NS, timeout_seconds=30):
            pass
    assert time.monotonic() - started < 10


def test_a_watch_drop_rate_cuts_that_share_of_watches(make_cluster):
    cluster = make_cluster(faults=FaultConfig(watch_drop_rate=1.0))
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):
        for _event in watch.Watch().stream(cluster.core.list_namespaced_pod, NS, timeout_seconds=30):
            pass
    assert time.monotonic() - started < 10
    with pytest.raises(urllib.error.HTTPError) as caught:
        cluster.faults("PATCH", {"watch_drop_rate": 1.5})
    assert caught.value.code == 400


def test_the_admin_endpoint_validates_and_reports_the_config(make_cluster):
    cluster = make_cluster()
    assert cluster.faults()["error_rate"] == 0.0
    with pytest.raises(urllib.error.HTTPError) as caught:
        cluster.faults("PUT", {"error_rate": 2})
    assert caught.value.code == 400
    with pytest.raises(urllib.error.HTTPError):
        cluster.faults("PUT", {"no_such_fault": 1})
    assert cluster.faults("PUT", {"latency_ms": 5})["latency_ms"] == 5
    assert cluster.faults()["latency_ms"] == 5
