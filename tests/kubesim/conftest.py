"""Fixtures that start real kubesim API servers on free loopback ports and clients that talk to them.

`kubesim_factory(configure=None, **server_options)` starts an extra server (options as for
`kubesim.apiserver.server.Server`, e.g. token=, history_size=, bookmark_interval=); `configure(server)` runs before
it starts, so cluster tests can register controllers, routes and hooks. `kubesim` is a shared server.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from kubernetes.dynamic import DynamicClient

from kubesim.apiserver.server import Server


@pytest.fixture(scope="session")
def kubesim_factory():
    servers: list[Server] = []

    def make(configure=None, **options) -> Server:
        options.setdefault("seed", 1)
        server = Server(port=0, **options)
        if configure is not None:
            configure(server)
        server.start_in_thread()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop_in_thread()


@pytest.fixture(scope="session")
def kubesim(kubesim_factory) -> Server:
    return kubesim_factory(bookmark_interval=0.2)


def api_client_for(server: Server, token: str | None = None) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = server.url
    if token:
        cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


@pytest.fixture(scope="session")
def api_client(kubesim) -> client.ApiClient:
    return api_client_for(kubesim)


@pytest.fixture(scope="session")
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def apps(api_client) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture(scope="session")
def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def dyn(api_client, tmp_path_factory) -> DynamicClient:
    return DynamicClient(api_client, cache_file=str(tmp_path_factory.mktemp("dyn") / "discovery.json"))


@pytest.fixture
def namespace(core) -> str:
    """A fresh namespace per test, so tests sharing the server never see each other's objects."""
    name = "t-" + uuid.uuid4().hex[:10]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


@pytest.fixture
def kubectl(kubesim, tmp_path):
    """Run kubectl against the shared server with a private discovery cache."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not on PATH")

    def run(*args: str, input: str | None = None, check: bool = True, server: Server | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = ["kubectl", "--server", (server or kubesim).url, "--cache-dir", str(tmp_path / "kcache"), *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed: {proc.stderr}")
        return proc

    return run


def deployment(name: str, replicas: int = 1, image: str = "nginx:1.27", **extra) -> dict:
    """A minimal valid apps/v1 Deployment manifest."""
    labels = {"app": name}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)},
                         "spec": {"containers": [{"name": "app", "image": image}]}},
        },
    }
    body.update(extra)
    return body


def owned_configmap(name: str, owner, block: bool = False, finalizers: list[str] | None = None) -> dict:
    """A ConfigMap manifest whose ownerReference points at the Deployment `owner`."""
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner.metadata.name, "uid": owner.metadata.uid,
           "blockOwnerDeletion": block}
    meta = {"name": name, "ownerReferences": [ref]}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"metadata": meta}


def exists(read, *args) -> bool:
    """Whether `read(*args)` finds the object (a 404 says it does not)."""
    try:
        read(*args)
        return True
    except ApiException as e:
        assert e.status == 404
        return False
