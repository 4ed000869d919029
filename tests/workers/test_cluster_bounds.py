"""Workers never hang on a cluster: every call has a timeout (discovery included), a pass has a total
deadline, a slow or huge /metrics costs only its own pod, and one bad cluster never stops the others."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from apps.clusters.models import GpuNode
from apps.telemetry.models import PodStat
from kubesim.cluster.faults import FaultConfig
from tests.factories import ClusterFactory, InferenceServiceFactory
from tests.telemetry.expositions import vllm
from workers.kube import Kube
from workers.kubeerrors import TransientClusterError
from workers.reconcile import reconcile
from workers.telemetry import scrape_cluster


def finishes_within(seconds, fn, *args):
    """Run fn in a thread (its own database connection: tests using it need `transactional_db`); its result,
    or a test failure when it is still running after `seconds`."""
    box = {}

    def run():
        try:
            box["result"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc
        finally:
            connection.close()  # the thread's own connection, or the test database cannot be dropped

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds}s")
    box["elapsed"] = time.monotonic() - started
    return box


def test_discovery_against_a_slow_api_server_times_out(db, make_cluster):
    handle = make_cluster(faults=FaultConfig(latency_ms=8000, path_contains="/apis"))
    kube = Kube(ClusterFactory(api_url=handle.url).credentials(), timeout_seconds=1.0)
    box = finishes_within(30, kube.resource, "apps/v1", "Deployment")
    assert isinstance(box.get("error"), TransientClusterError), box
    # Bounded: it gave up before the slow server would have answered even once (each attempt takes 1 s plus
    # backoff; a loaded machine stretches that, so the bound is the fault's latency, not a tight figure).
    assert box["elapsed"] < 8


def test_a_new_client_discovers_on_the_wire_and_reads_nothing_an_earlier_one_left(db, make_cluster):
    """An API server at an address an earlier client discovered (upgraded, or another cluster on a reused
    address) is discovered again: the library's own discovery file, named by the URL, would answer instead."""
    handle = make_cluster()
    creds = ClusterFactory(api_url=handle.url).credentials()
    assert Kube(creds).resource("apps/v1", "Deployment").kind == "Deployment"
    handle.faults("PUT", {"latency_ms": 8000, "path_contains": "/apis"})  # discovery now answers too late
    box = finishes_within(30, Kube(creds, timeout_seconds=1.0).resource, "apps/v1", "Deployment")
    assert isinstance(box.get("error"), TransientClusterError), box


def test_a_failed_discovery_read_does_not_break_the_client_for_good(db, make_cluster):
    """A kind the cluster does not serve makes the library read discovery again; a 503 on that read left its cache
    without resources, and every later lookup of a kind not yet resolved failed with KeyError('resources') for the
    life of the client (a chaos run's worker failed every pass that way). The next lookup starts again instead."""
    handle = make_cluster()
    kube = Kube(ClusterFactory(api_url=handle.url).credentials())
    assert kube.resource("apps/v1", "Deployment").kind == "Deployment"
    handle.faults("PUT", {"error_count": 1, "error_codes": [503], "path_contains": "/version"})
    with pytest.raises(TransientClusterError):
        kube.resource("example.com/v1", "Nothing")  # not served: discovery is read again, and that read fails
    assert handle.faults()["error_count"] == 0  # the 503 was served

    assert kube.list("apps/v1", "Deployment", namespace="default") == []  # a kind resolved before still answers
    assert kube.resource("policy/v1", "PodDisruptionBudget").kind == "PodDisruptionBudget"
    assert kube.resource("apps/v1", "Deployment").kind == "Deployment"


def test_a_reconcile_pass_has_a_total_deadline(transactional_db, make_cluster, settings):
    settings.RECONCILE_PASS_DEADLINE_SECONDS = 2
    settings.KUBE_WATCH_CACHE = False  # every read on the wire: a steady pass from the caches sends almost nothing
    handle = make_cluster()
    svc = InferenceServiceFactory(cluster=ClusterFactory(api_url=handle.url))
    reconcile(svc.pk)  # discovery warmed, objects exist
    # Every call now takes 0.7 s: each is within its own timeout, but a pass makes far more than three.
    handle.faults("PATCH", {"latency_ms": 700})
    box = finishes_within(60, reconcile, svc.pk)
    assert isinstance(box.get("error"), TransientClusterError), box
    assert "deadline" in box["error"].message
    assert box["elapsed"] < 6


@contextmanager
def fake_api_server(routes):
    """A loopback HTTP server standing in for an API server: `routes[path](handler)` writes the answer."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            route = routes.get(urllib.parse.unquote(self.path.split("?")[0]))
            if route is None:
                missed.append(self.path)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with suppress(BrokenPipeError, ConnectionResetError):  # the scraper hung up on an endless body
                route(self)

        def log_message(self, *args):
            pass

    missed: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if missed:
            print("paths not served:", missed)  # shown with a failing test
        server.shutdown()
        server.server_close()


def answer(data: bytes, content_type: str):
    """A route that answers 200 with `data` in full."""
    def write(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return write


def json_answer(body):
    return answer(json.dumps(body).encode(), "application/json")


def text_answer(text):
    return answer(text.encode(), "text/plain; version=0.0.4")


def endless(block: bytes, pause: float):
    """An exposition that never ends: `block` every `pause` seconds (a drip, or a flood)."""
    def write(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.end_headers()  # no length: the body runs until the connection closes
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            handler.wfile.write(block)
            handler.wfile.flush()
            time.sleep(pause)
    return write


def engine_pod(name, uid):
    return {"metadata": {"name": name, "namespace": "tenant-acme",
                         "labels": {"app.kubernetes.io/managed-by": "controlplane",
                                    "app.kubernetes.io/component": "engine", "controlplane.io/service-uid": uid}},
            "spec": {"nodeName": "gpu-0", "containers": [{"name": "engine", "ports": [
                {"name": "http", "containerPort": 8000}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_slow_or_huge_metrics_costs_only_its_own_pod(transactional_db, settings):
    settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS = 2
    settings.TELEMETRY_MAX_EXPOSITION_BYTES = 1_000_000
    cluster = ClusterFactory()
    names = ("fast", "drip", "flood")
    services = {name: InferenceServiceFactory(name=name, cluster=cluster) for name in names}
    pods = {"kind": "PodList", "items": [engine_pod(f"{n}-0", str(services[n].uid)) for n in names]}
    proxy = "/api/v1/namespaces/tenant-acme/pods/{}-0:8000/proxy/metrics"
    routes = {
        "/api/v1/pods": json_answer(pods),
        proxy.format("fast"): text_answer(vllm(running=3.0)),
        proxy.format("drip"): endless(b"#", 0.3),  # every read succeeds in time; the whole never ends
        proxy.format("flood"): endless(b"# padding\n" * 6500, 0.0),
    }
    with fake_api_server(routes) as url:
        type(cluster).objects.filter(pk=cluster.pk).update(api_url=url)
        cluster.refresh_from_db()
        box = finishes_within(40, scrape_cluster, cluster)
    assert "error" not in box, box
    report = box["result"]
    assert (report.pods, report.errors) == (3, 2)
    assert box["elapsed"] < 10
    stats = {s.service.name: s for s in PodStat.objects.select_related("service")}
    assert stats["fast"].error == "" and stats["fast"].snapshot
    assert "seconds" in stats["drip"].error
    assert "bytes" in stats["flood"].error


def test_one_bad_cluster_never_stops_the_inventory_of_the_others(transactional_db, make_cluster):
    from workers.tasks.reconcile import sync_inventories

    broken_node = {"metadata": {"name": "odd", "labels": {}},
                   "status": {"allocatable": {"nvidia.com/gpu": "many"}}}
    core = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["get", "list"]},
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"]}]}
    routes = {
        "/version": json_answer({"major": "1", "minor": "33", "gitVersion": "v1.33.0"}),
        "/api": json_answer({"kind": "APIVersions", "versions": ["v1"]}),
        "/apis": json_answer({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}),
        "/api/v1": json_answer(core),
        "/api/v1/nodes": json_answer({"kind": "NodeList", "apiVersion": "v1", "items": [broken_node]}),
        "/api/v1/pods": json_answer({"kind": "PodList", "apiVersion": "v1", "items": []}),
    }
    with fake_api_server(routes) as url:
        ClusterFactory(name="aaa-broken", api_url=url)  # first in name order
        handle = make_cluster()
        good = ClusterFactory(name="zzz-good", api_url=handle.url)
        box = finishes_within(60, sync_inventories)
    assert "error" not in box, box
    assert box["result"]["aaa-broken"] is None
    nodes = len(handle.core.list_node().items)
    assert box["result"]["zzz-good"] == nodes == GpuNode.objects.filter(cluster=good).count() > 0
