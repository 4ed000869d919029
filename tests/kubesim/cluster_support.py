"""A fresh simulated cluster per test (nodes, controllers, kubelet) behind a real kubesim API server,
reached with the official `kubernetes` client over HTTP."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from dataclasses import dataclass

from kubernetes import client

from kubesim.apiserver.server import Server
from kubesim.cluster.assembly import Cluster, ClusterConfig
from kubesim.cluster.faults import FaultConfig
from tests.polling import wait_for

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass
class ClusterHandle:
    server: Server
    cluster: Cluster
    api_client: client.ApiClient

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api_client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def faults(self, method: str = "GET", body: dict | None = None, path: str = "/kubesim/faults") -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def kubectl(self, *args: str, tmp_path=None, check: bool = True) -> subprocess.CompletedProcess:
        cmd = ["kubectl", "--server", self.url, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed: {proc.stderr}")
        return proc


def cluster_fixture():
    """Body of each test module's `make_cluster` fixture: `make_cluster(nodes=..., faults=FaultConfig(...))`
    starts a fast-start cluster, stopped after the test."""
    started: list[ClusterHandle] = []

    def make(
        nodes: str = "h100-sxm-80gb:1x8,l4-24gb:2x1",
        faults: FaultConfig | None = None,
        fast_start: bool = True,
        routing_policies: dict | None = None,
    ) -> ClusterHandle:
        server = Server(port=0, seed=7)
        cluster = Cluster(
            server,
            ClusterConfig(nodes=nodes, fast_start=fast_start, seed=7, faults=faults or FaultConfig()),
            routing_policies=routing_policies,
        )
        cluster.install()
        server.start_in_thread()
        configuration = client.Configuration()
        configuration.host = server.url
        handle = ClusterHandle(server, cluster, client.ApiClient(configuration))
        started.append(handle)
        wait_for(lambda: cluster.ready is not None and cluster.ready.is_set(), message="cluster start")
        return handle

    yield make
    for handle in started:
        handle.api_client.close()
        handle.server.stop_in_thread()


def deployment(
    name: str,
    replicas: int = 1,
    image: str = "nginx:1.27",
    gpus: int = 0,
    node_selector: dict | None = None,
    tolerations: list | None = None,
    strategy: dict | None = None,
    command: list[str] | None = None,
) -> dict:
    """An apps/v1 Deployment whose container may ask for GPUs."""
    labels = {"app": name}
    container = {"name": "app", "image": image, "ports": [{"containerPort": 8080, "name": "http"}]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if command:
        container["command"] = command
    spec = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    if strategy:
        body["spec"]["strategy"] = strategy
    return body


def pod_manifest(
    name: str,
    gpus: int = 0,
    node_selector: dict | None = None,
    tolerations: list | None = None,
    image: str = "nginx:1.27",
    command: list[str] | None = None,
    labels: dict | None = None,
) -> dict:
    container = {"name": "app", "image": image}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if command:
        container["command"] = command
    spec = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def is_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def events_for(core: client.CoreV1Api, namespace: str, name: str, reason: str | None = None) -> list:
    events = core.list_namespaced_event(namespace).items
    return [e for e in events if e.involved_object.name == name and (reason is None or e.reason == reason)]
