"""The cluster's side of the API server's endpoints (kubesim/apiserver/kubelets.py): the kubelet API
(logs, ports, exec in a container's view) and the pod network (ready endpoints, NetworkPolicy checks)."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime

from kubesim.apiserver.errors import ApiError
from kubesim.cluster import shell
from kubesim.cluster.containerenv import source_data
from kubesim.cluster.dialing import PodDialer, Route, port_number_and_name
from kubesim.cluster.netpol import SOURCE_POD_HEADER, ingress_allowed, refused, source_of
from kubesim.engines import VLLM_IMAGES, image_repo
from kubesim.workload import Endpoint

# PID 1 of images run without a command: their ENTRYPOINT
_ENTRYPOINTS = {repo: ["python3", "-m", "vllm.entrypoints.openai.api_server"] for repo in VLLM_IMAGES}


class PodNetwork:
    """`kubesim.apiserver.kubelets.PodNetwork` over the cluster view and kubesim/cluster/netpol.py."""

    source_header = SOURCE_POD_HEADER

    def __init__(self, store, view):
        self.store, self.view = store, view

    def ready_endpoints(self, namespace: str, label_selector: str, port: int | str | None = None) -> list[Endpoint]:
        return self.view.ready_endpoints(namespace, label_selector, port)

    def source(self, header: str | None):
        return source_of(self.store, header)

    def admits(self, pod: dict, source, port) -> bool:
        return ingress_allowed(self.store, pod, source, *port_number_and_name(pod, port))

    def refused(self, pod: dict, port) -> ApiError:
        return refused(pod, port)


class KubeletApi:
    """`kubesim.apiserver.kubelets.Kubelets` over the cluster's kubelet."""

    def __init__(self, store, kubelet):
        self.store, self.kubelet = store, kubelet

    def logs(self, namespace: str, name: str, container: str | None, previous: bool) -> list[str] | None:
        return self.kubelet.logs(namespace, name, container, previous)

    def pod_port(self, namespace: str, name: str, port: str | int | None) -> int | None:
        return self.kubelet.port(namespace, name, port)

    def forward_port(self, namespace: str, name: str, port: int) -> int | None:
        runtime = self.kubelet.runtimes.get((namespace, name))
        if runtime is None:
            return None
        for container in runtime.containers:
            for declared in container.spec.get("ports") or []:
                if declared.get("containerPort") == port and container.port is not None:
                    return container.port
        # an undeclared port: the container that listens (every simulated workload serves one port)
        return next((c.port for c in runtime.containers if c.port is not None and c.workload is not None), None)

    def exec_in(self, pod: dict, container: str) -> Callable[[list[str]], shell.Result]:
        """A runner for commands in the container; call it off the event loop (a command may dial a workload
        that this loop serves), it routes connections on the loop, where the store and kubelet live."""
        view = self.view(pod, container)
        view.dial = self._dialer(pod, asyncio.get_running_loop())
        return lambda command: shell.run(view, command)

    def _dialer(self, pod: dict, loop: asyncio.AbstractEventLoop) -> Callable[..., shell.Reply]:
        network = PodDialer(self.store, self.kubelet)
        meta = pod["metadata"]

        async def route(host: str, port: int, path: str) -> Route:
            source = source_of(self.store, f"{meta.get('namespace') or 'default'}/{meta['name']}")
            return network.route(source, host, port, path)

        def dial(host: str, port: int, path: str, timeout: float) -> shell.Reply:
            where = asyncio.run_coroutine_threadsafe(route(host, port, path), loop).result(timeout)
            if where.local_url is None:
                return shell.Reply(where.status, where.body, where.error, where.message)
            try:
                with urllib.request.urlopen(where.local_url, timeout=timeout) as response:  # noqa: S310 - loopback
                    return shell.Reply(response.status, response.read().decode(errors="replace"))
            except urllib.error.HTTPError as error:
                return shell.Reply(error.code, error.read().decode(errors="replace"))
            except OSError:
                return shell.Reply(error=28, message=f"Failed to connect to {host} port {port}: Timeout was reached")

        return dial

    def view(self, pod: dict, container_name: str) -> shell.Container:
        """What a command in the container sees: environment, files, PID 1 and the GPUs it holds."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        namespace, name = meta.get("namespace") or "default", meta["name"]
        runtime = self.kubelet.runtimes.get((namespace, name))
        running = next((c for c in runtime.containers if c.name == container_name), None) if runtime else None
        if running is None or running.workload is None:
            raise ApiError.bad_request(f'container not found ("{container_name}")')
        cspec = running.spec
        env = [("PATH", shell.PATH), ("HOSTNAME", name), *running.env.items()]
        if self.store.exists("v1/services", "default", "kubernetes"):
            svc = self.store.get("v1/services", "default", "kubernetes")
            ip = (svc.get("spec") or {}).get("clusterIP", "")
            env += [("KUBERNETES_SERVICE_HOST", ip), ("KUBERNETES_SERVICE_PORT", "443"),
                    ("KUBERNETES_PORT", f"tcp://{ip}:443")]
        env.append(("HOME", "/root"))
        pod_ip = runtime.pod_ip
        files = {
            "/etc/hostname": name + "\n",
            "/etc/hosts": ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost "
                           f"ip6-loopback\n{pod_ip}\t{name}\n"),
            "/etc/resolv.conf": (f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
                                 "nameserver 10.96.0.10\noptions ndots:5\n"),
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace": namespace,
        }
        files.update(self._volume_files(namespace, spec, cspec))
        entrypoint = cspec.get("command") or _ENTRYPOINTS.get(image_repo(cspec.get("image", "")), [])
        command = [*entrypoint, *(cspec.get("args") or [])]
        started = ((running.state.get("running") or {}).get("startedAt"))
        started_at = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() if started else time.time()
        gpus = [(d, self.kubelet.gpus.read(d, running.workload))
                for d in self.kubelet.gpus.of_pod(namespace, name, container_name)]
        return shell.Container(namespace, name, container_name, pod_ip, env, files,
                               " ".join(command) or cspec.get("image", "").rsplit("/", 1)[-1].split(":")[0],
                               started_at, gpus)

    def _volume_files(self, namespace: str, spec: dict, cspec: dict) -> dict[str, str]:
        """Files of the ConfigMap and Secret volumes the container mounts (keys, or `items` paths)."""
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        out = {}
        for mount in cspec.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name")) or {}
            if "configMap" in volume:
                kind, ref = "configmaps", volume["configMap"]
                source = ref.get("name")
            elif "secret" in volume:
                kind, ref = "secrets", volume["secret"]
                source = ref.get("secretName")
            else:
                continue
            try:
                data = source_data(self.store.get(f"v1/{kind}", namespace, source)) or {}
            except ApiError:
                continue
            paths = {i["key"]: i.get("path", i["key"]) for i in ref.get("items") or [] if "key" in i} \
                or {k: k for k in data}
            base = mount.get("mountPath", "/").rstrip("/")
            if mount.get("subPath"):
                key = next((k for k, p in paths.items() if p == mount["subPath"]), None)
                if key in data:
                    out[base] = data[key]
                continue
            for key, path in paths.items():
                if key in data:
                    out[f"{base}/{path}"] = data[key]
        return out
