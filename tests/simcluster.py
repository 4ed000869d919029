"""The simulated cluster the tests share: a real kubesim API server with nodes, controllers and kubelet on a
free loopback port, reached with the official `kubernetes` client over HTTP. Tests use the `make_cluster`
fixture from tests/conftest.py."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.request
from dataclasses import dataclass

from kubernetes import client

from kubesim.apiserver.server import Server
from kubesim.cluster.assembly import Cluster, ClusterConfig
from kubesim.cluster.faults import FaultConfig
from tests.polling import wait_for


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


@contextlib.contextmanager
def cluster_starter():
    """Behind the `make_cluster` fixture (tests/conftest.py), usable for a module-scoped cluster too:
    `make(nodes=..., faults=FaultConfig(...))` starts a fast-start cluster; all are stopped on exit."""
    started: list[ClusterHandle] = []

    def make(
        nodes: str = "h100-sxm-80gb:1x8,l4-24gb:2x1",
        faults: FaultConfig | None = None,
        fast_start: bool = True,
        routing_policies: dict | None = None,
        seed: int = 7,
        dcgm_exporter: bool = False,
        authorization: str = "open",
        pod_network: str = "overlay",
        models_dir: str | None = None,
    ) -> ClusterHandle:
        server = Server(port=0, seed=seed, authorization=authorization)
        cluster = Cluster(
            server,
            ClusterConfig(nodes=nodes, fast_start=fast_start, seed=seed, faults=faults or FaultConfig(),
                          dcgm_exporter=dcgm_exporter, pod_network=pod_network, models_dir=models_dir),
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

    try:
        yield make
    finally:
        for handle in started:
            handle.api_client.close()
            handle.server.stop_in_thread()
