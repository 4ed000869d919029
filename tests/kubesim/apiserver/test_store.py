"""The in-process extension points: Store calls and watches, admission hooks, extra routes, middlewares,
background tasks, persistence and the command line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml
from aiohttp import web
from kubernetes import client
from kubernetes.client import ApiException

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.server import Server
from kubesim.apiserver.store import Store
from tests.kubesim.conftest import api_client_for, deployment
from tests.ports import free_port


def test_store_calls_share_semantics_with_http(kubesim, apps, namespace):
    store = kubesim.store
    created = kubesim.call(store.create, "apps/v1/deployments", namespace, deployment("web"), field_manager="ctrl")
    assert created["metadata"]["generation"] == 1
    over_http = apps.read_namespaced_deployment("web", namespace)
    assert over_http.metadata.resource_version == created["metadata"]["resourceVersion"]
    status = kubesim.call(store.update_status, ("apps", "v1", "deployments"), namespace, "web",
                          {"status": {"replicas": 1}}, field_manager="ctrl")
    assert status["metadata"]["generation"] == 1 and status["status"] == {"replicas": 1}
    items, rv = kubesim.call(store.list, "apps/v1/deployments", namespace, "app=web")
    assert [i["metadata"]["name"] for i in items] == ["web"] and rv == str(store.resource_version)
    with pytest.raises(ApiError) as e:
        kubesim.call(store.get, "apps/v1/deployments", namespace, "nope")
    assert (e.value.code, e.value.reason) == (404, "NotFound")


def test_in_process_watch_receives_changes_made_over_http(kubesim, core, namespace):
    async def subscribe():
        return kubesim.store.watch("v1/configmaps", namespace)

    sub = asyncio.run_coroutine_threadsafe(subscribe(), kubesim.loop).result(5)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    core.delete_namespaced_config_map("a", namespace)

    async def take(n):
        out = []
        async for ev in sub:
            out.append((ev.type, ev.object["metadata"]["name"]))
            if len(out) == n:
                break
        sub.close()
        return out

    got = asyncio.run_coroutine_threadsafe(asyncio.wait_for(take(2), 5), kubesim.loop).result(10)
    assert got == [("ADDED", "a"), ("DELETED", "a")]


def quota_hook(req):
    """Refuse a fourth ConfigMap in namespaces labelled quota=3 (what a ResourceQuota hook would do)."""
    if req.operation != "CREATE" or req.resource.plural != "configmaps":
        return
    ns = req.store.get("v1/namespaces", None, req.namespace)
    if (ns["metadata"].get("labels") or {}).get("quota") == "3":
        items, _ = req.store.list("v1/configmaps", req.namespace)
        if len(items) >= 3:
            raise ApiError.forbidden("configmaps", req.name, "exceeded quota: q, requested: count/configmaps=1, "
                                     "used: count/configmaps=3, limited: count/configmaps=3")


async def log_handler(request: web.Request) -> web.Response:
    return web.Response(text=f"log of {request.match_info['name']}\n")


@web.middleware
async def tagging_middleware(request, handler):
    response = await handler(request)
    response.headers["X-Kubesim-Test"] = "1"
    return response


@pytest.fixture(scope="module")
def extended(kubesim_factory):
    started = []

    async def controller(server: Server):
        started.append(server.port)
        await asyncio.Event().wait()

    def configure(server: Server):
        server.add_admission_hook(quota_hook)
        server.add_route("GET", "/api/v1/namespaces/{namespace}/pods/{name}/log", log_handler)
        server.add_middleware(tagging_middleware)
        server.add_background_task(controller)

    server = kubesim_factory(configure=configure)
    server.started = started
    return server


def test_admission_hooks_can_reject_with_a_status(extended):
    core = client.CoreV1Api(api_client_for(extended))
    core.create_namespace({"metadata": {"name": "small", "labels": {"quota": "3"}}})
    for i in range(3):
        core.create_namespaced_config_map("small", {"metadata": {"name": f"c{i}"}})
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("small", {"metadata": {"name": "c3"}})
    body = json.loads(e.value.body)
    assert (body["code"], body["reason"]) == (403, "Forbidden")
    assert body["message"].startswith('configmaps "c3" is forbidden: exceeded quota: q')


def test_registered_routes_win_over_the_api_router_and_middlewares_run(extended):
    with urllib.request.urlopen(f"{extended.url}/api/v1/namespaces/default/pods/p1/log") as resp:
        assert resp.read() == b"log of p1\n"
        assert resp.headers["X-Kubesim-Test"] == "1"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{extended.url}/api/v1/namespaces/default/pods/p1/exec")
    assert e.value.code == 404


def test_background_tasks_start_with_the_server(extended):
    assert extended.started == [extended.port]


def test_state_file_survives_a_restart(tmp_path):
    state = str(tmp_path / "state.json")
    first = Server(port=0, state_file=state).start_in_thread()
    core = client.CoreV1Api(api_client_for(first))
    core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}, "data": {"a": "1"}})
    rv = int(core.list_namespaced_config_map("default").metadata.resource_version)
    first.stop_in_thread()
    second = Server(port=0, state_file=state).start_in_thread()
    try:
        core = client.CoreV1Api(api_client_for(second))
        assert core.read_namespaced_config_map("kept", "default").data == {"a": "1"}
        after = core.create_namespaced_config_map("default", {"metadata": {"name": "new"}})
        assert int(after.metadata.resource_version) > rv
        lws = client.CustomObjectsApi(api_client_for(second)).list_namespaced_custom_object(
            "leaderworkerset.x-k8s.io", "v1", "default", "leaderworkersets")
        assert lws["items"] == []
    finally:
        second.stop_in_thread()


def test_command_line_serves_and_prints_a_kubeconfig(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kubesim", "kubeconfig", "--port", "6553"], capture_output=True,
                         text=True, check=True).stdout
    config = yaml.safe_load(out)
    assert config["clusters"][0]["cluster"]["server"] == "http://127.0.0.1:6553"
    port = free_port()
    state = tmp_path / "cli-state.json"
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--seed", "3",
                             "--state", str(state)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert "listening" in proc.stdout.readline()
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(subprocess.run([sys.executable, "-m", "kubesim", "kubeconfig", "--port", str(port)],
                                             capture_output=True, text=True, check=True).stdout)
        got = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "c"),
                              "get", "namespaces", "-o", "name"], capture_output=True, text=True, timeout=60)
        assert "namespace/default" in got.stdout, got.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    deadline = time.monotonic() + 5
    while not state.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "default" in state.read_text()


def test_a_seed_makes_uids_and_generated_names_repeatable():
    def first_objects(seed):
        store = Store(seed=seed)
        cm = store.create("v1/configmaps", "default", {"metadata": {"generateName": "run-"}})
        return cm["metadata"]["name"], cm["metadata"]["uid"]

    assert first_objects(7) == first_objects(7)
    assert first_objects(7) != first_objects(8)
