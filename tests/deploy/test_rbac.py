"""The ClusterRole in deploy/kubernetes grants exactly what the workers use: the reconcile end-to-end
tests, the GPU inventory and the telemetry scraper run against a kubesim that records every request,
each request is turned into the RBAC attributes Kubernetes would authorize (verb, API group, resource,
subresource), and each must be allowed by the ClusterRole; every rule must in turn be used or be needed."""

from __future__ import annotations

import time
from urllib.parse import parse_qs

import pytest
from aiohttp import web

from apps.serving.rendering.gateway import EPP_RULES
from apps.serving.rendering.routers import POD_READER
from kubesim.apiserver.server import Server
from kubesim.cluster.assembly import Cluster as SimCluster
from kubesim.cluster.assembly import ClusterConfig
from tests.deploy.manifests import find, render
from tests.polling import wait_for
from tests.workers import test_reconcile_e2e as e2e
from tests.workers.conftest import DEMO_NODES, workers  # noqa: F401 (fixture)
from tests.workers.test_reconcile_e2e import stack  # noqa: F401 (fixture; uses kubesim_url below)
from workers.reconcile import MANAGED_KINDS

pytestmark = pytest.mark.integration
Call = tuple[str, str, str]  # (verb, apiGroup, resource or resource/subresource)
TEST_CLIENT_HEADER = "X-Test-Client"
# Rendered without the service label (shared by a tenant's services): read by name, applied, never pruned.
# persistentvolumes: with PLATFORM_MODEL_CACHE, each namespace's own volume onto the shared cluster cache.
SHARED_RESOURCES = ("namespaces", "resourcequotas", "persistentvolumeclaims", "persistentvolumes")


@pytest.fixture
def recorded():
    """A kubesim cluster whose API server records (method, path, query, status) of every request."""
    calls: list[tuple[str, str, str, int]] = []

    @web.middleware
    async def record(request, handler):
        if request.headers.get(TEST_CLIENT_HEADER):
            return await handler(request)
        try:
            response = await handler(request)
        except web.HTTPException as error:
            calls.append((request.method, request.path, request.query_string, error.status))
            raise
        calls.append((request.method, request.path, request.query_string, response.status))
        return response

    server = Server(port=0, seed=11)
    cluster = SimCluster(server, ClusterConfig(nodes=DEMO_NODES, fast_start=True, seed=11))
    cluster.install()
    server.add_middleware(record)
    server.start_in_thread()
    wait_for(lambda: cluster.ready is not None and cluster.ready.is_set(), message="kubesim cluster start")
    yield server, calls
    server.stop_in_thread()


@pytest.fixture
def kubesim_url(recorded):
    """The reconcile end-to-end tests' cluster, here the recording one."""
    return recorded[0].url


def rbac_attributes(method: str, path: str, query: str, status: int) -> list[Call]:
    """What the API server authorizes for one request; [] for discovery (non-resource URLs)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return []  # /api, /apis, /apis/{group}/{version}, /openapi/...: discovery, allowed to everyone
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watching = parse_qs(query).get("watch", ["false"])[0] in ("true", "1")
    verb = {"GET": "watch" if watching else ("get" if name else "list"), "POST": "create", "PUT": "update",
            "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
    out = [(verb, group, resource)]
    if method == "PATCH" and status == 201:
        out.append(("create", group, resource))  # an apply that creates is authorized as create too
    return out


def allowed(rules: list[dict], verb: str, group: str, resource: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def granted(rules: list[dict]) -> set[Call]:
    return {(v, g, res) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def plural(kind: str) -> str:
    return kind.lower() + "s"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def test_the_cluster_role_covers_every_call_the_workers_make_and_grants_nothing_unused(recorded, stack, settings):  # noqa: F811
    _server, calls = recorded
    # The tests' own reads and edits (a manual `kubectl edit`, assertions) are not the workers' calls.
    stack["apps"].api_client.set_default_header(TEST_CLIENT_HEADER, "1")
    # The reconcile end-to-end tests, unchanged: a router's RBAC pruned (in this process, before any worker
    # runs); then through a real worker: create, scale, roll, delete; a manual edit undone.
    e2e.test_objects_a_new_spec_no_longer_needs_are_pruned_including_kinds_that_vanish(stack)
    e2e.test_a_service_created_through_the_api_becomes_ready_scales_rolls_and_is_deleted(stack)
    e2e.test_a_manual_edit_of_the_deployment_is_undone_by_the_next_resync(stack, settings)
    # The GPU inventory and one scrape of a ready engine.
    from workers.inventory import sync_inventory
    from workers.reconcile import kube_for, reconcile
    from workers.telemetry import scrape_cluster

    pk = e2e.create_service(stack, name="scraped")["id"]
    deadline = time.monotonic() + 120
    while e2e.service(pk).phase != "Ready":
        assert time.monotonic() < deadline, "the scraped service did not become Ready"
        reconcile(pk)
        time.sleep(0.3)
    assert sync_inventory(stack["cluster"], kube_for(stack["cluster"])) == 4  # 3 GPU nodes and the CPU node
    assert scrape_cluster(stack["cluster"]).pods >= 1

    used = {attr for call in calls for attr in rbac_attributes(*call)}
    rules = find(render("production"), "ClusterRole", "controlplane-workers")["rules"]
    assert ("patch", "apps", "deployments") in used and ("get", "", "pods/proxy") in used  # the recording works
    assert sorted(c for c in used if not allowed(rules, *c)) == []

    # Every grant is used here, or is a sync verb on a kind some other service shape renders (the same
    # list-apply-prune or get-apply sequence), or is held so that routers' Roles may be granted.
    sync_verbs = {"list", "create", "patch", "delete"}
    needed = set(used)
    needed |= {(v, group_of(api), plural(kind)) for api, kind in MANAGED_KINDS for v in sync_verbs}
    needed |= {(v, "", res) for res in SHARED_RESOURCES for v in ("get", "create", "patch")}
    needed |= granted([POD_READER, *EPP_RULES])
    assert sorted(granted(rules) - needed) == []
    # And the routers' rules are held, or RBAC would refuse to create their Roles (no privilege escalation).
    assert sorted(c for c in granted([POD_READER, *EPP_RULES]) if not allowed(rules, *c)) == []
