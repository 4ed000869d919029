"""The contract between the kubelet (what runs a pod) and what a pod's container serves.

The kubelet asks the factory it was given (`kubesim.engines.workload_for(ctx)`) for a workload; engine and
router images get a simulated vLLM/SGLang engine or router, anything else the generic workload (`/health`).
A workload listens on a real loopback port so the pod and service proxies forward plain HTTP to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from aiohttp import web


@dataclass(frozen=True)
class Endpoint:
    """One ready pod behind a selector: its name, labels and the base URL its workload listens on."""

    pod_name: str
    base_url: str
    labels: dict[str, str] = field(default_factory=dict)


class ClusterView(Protocol):
    """What a workload may ask of the cluster (routers discover their backends through it)."""

    def ready_endpoints(self, namespace: str, label_selector: str, port: int | None = None) -> list[Endpoint]:
        """Ready pods in `namespace` matching `label_selector` (Kubernetes selector syntax)."""
        ...


@dataclass(frozen=True)
class EngineFault:
    """What a fault makes of a simulated engine (kubesim.cluster.faults, selected by pod label): every step takes
    `slowdown` times as long, `error_rate` of the inference requests fail with a 500, and with `crash_on_start`
    the container exits as soon as it starts (a crash loop)."""

    slowdown: float = 1.0
    error_rate: float = 0.0
    crash_on_start: bool = False


@dataclass
class PodContext:
    """Everything a workload needs to know about the pod container it runs."""

    namespace: str
    pod_name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    container: dict  # the container spec as in the Pod (image, command, args, env, ports, resources)
    env: dict[str, str]  # resolved environment of the container
    gpu_key: str | None  # GPU key of the node (gpus-and-models.md), e.g. "h100-sxm-80gb"; None for CPU nodes
    gpu_count: int  # nvidia.com/gpu (or amd.com/gpu) limit of the container
    seed: int
    fast_start: bool
    cluster: ClusterView | None = None
    fault: EngineFault | None = None  # set by the cluster when an engine fault selects the pod
    node_class: str | None = None  # "cpu-real": the node runs real engines (kubesim/engines/real.py)
    models_dir: str | None = None  # the host folder a cpu-real node's model volumes map to
    weights_cache: str | None = None  # where the weights are read from: "node", "cluster", "none" (download first)


class WorkloadExit(Exception):
    """The container exited (bad flags, crash). The kubelet records the logs and restarts with back-off."""

    def __init__(self, message: str, exit_code: int = 1, logs: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.logs = logs or [message]


class Workload(Protocol):
    """A running container's behaviour."""

    def startup_seconds(self) -> float:
        """Seconds from container start until it should report Ready (model load time for engines)."""
        ...

    async def start(self) -> int:
        """Listen on 127.0.0.1 on a free port and return it; raise WorkloadExit on a bad configuration."""
        ...

    async def stop(self) -> None: ...

    def logs(self) -> list[str]:
        """Lines the container printed so far (what `kubectl logs` returns)."""
        ...

    # Optional: `probe(method, path) -> int | None` answers the kubelet's httpGet probes in-process with
    # the status the path would answer over HTTP (None: ask over HTTP). Without it every probe is a
    # loopback HTTP request.
    # Optional: `until_ready()`, awaited instead of the start-up delay (a real engine's /health), and
    # `until_exit() -> (exit code, message)`, which returns when the container's process ends by itself.
    # Optional: `gpu_usage() -> (memory fraction held per GPU, utilization 0..1)`. Workloads that have it
    # (the simulated engines) drive nvidia-smi, the dcgm-exporter and `kubectl top`; others read as idle.


# What the kubelet is given to pick a container's workload (`kubesim.engines.workload_for`): None means
# kubesim does not simulate the image and the generic workload runs it.
WorkloadFactory = Callable[[PodContext], "Workload | None"]


async def listen_on_loopback(runner: web.AppRunner) -> int:
    """Set up `runner` and serve it on a free 127.0.0.1 port; returns the port."""
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return site._server.sockets[0].getsockname()[1]


async def relay(upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    """Copy `upstream`'s body to the prepared `response` as it arrives, then end it."""
    try:
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        upstream.close()  # the client went away mid-stream: stop reading upstream too
