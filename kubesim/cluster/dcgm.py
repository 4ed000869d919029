"""A simulated NVIDIA dcgm-exporter on every NVIDIA GPU node, as the GPU operator runs it.

At start the cluster creates, in namespace `gpu-operator`, one pod `nvidia-dcgm-exporter-<node>` bound to each
NVIDIA GPU node (image `nvcr.io/nvidia/k8s/dcgm-exporter`, port 9400 `metrics`) and the Service
`nvidia-dcgm-exporter` in front of them. The pod's workload serves `/metrics` in the exporter's format: the
default counters per GPU of its node, labelled as dcgm-exporter labels them (`gpu`, `UUID`, `pci_bus_id`,
`device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, and `container`, `namespace`, `pod` of the
container holding the GPU). Values come from `kubesim.cluster.gpus`. Reach it like any pod:
`kubectl get --raw /api/v1/namespaces/gpu-operator/pods/nvidia-dcgm-exporter-<node>:9400/proxy/metrics`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from kubesim.cluster.gpus import Device, Reading
from kubesim.cluster.shell import DRIVER_VERSION
from kubesim.workload import PodContext, listen_on_loopback

NAMESPACE = "gpu-operator"
APP = "nvidia-dcgm-exporter"
IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
PORT = 9400
LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
HOLDER_LABELS = ("container", "namespace", "pod")
SM_CLOCK_IDLE = 345

# (name, help) of dcgm-exporter's default counters that kubesim simulates
COUNTERS = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
]


def is_exporter(ctx: PodContext) -> bool:
    return ctx.container.get("image", "").split(":", 1)[0] == IMAGE.split(":", 1)[0]


def values(device: Device, reading: Reading) -> dict[str, float]:
    """Each counter's value for one device at one reading."""
    from kubesim.cluster.shell import _power, _temperature

    util = reading.utilization
    top = device.gpu.sm_clock_max_mhz or 1800
    return {
        "DCGM_FI_DEV_SM_CLOCK": round(SM_CLOCK_IDLE + (top - SM_CLOCK_IDLE) * util) if util else SM_CLOCK_IDLE,
        "DCGM_FI_DEV_MEM_CLOCK": device.gpu.mem_clock_mhz or 1593,
        "DCGM_FI_DEV_GPU_TEMP": _temperature(reading),
        "DCGM_FI_DEV_POWER_USAGE": round(_power(device, reading), 3),
        "DCGM_FI_DEV_GPU_UTIL": round(util * 100),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 100 * 0.55),
        "DCGM_FI_DEV_FB_FREE": reading.free_mib,
        "DCGM_FI_DEV_FB_USED": reading.used_mib,
    }


def exposition(node_name: str, readings: list[tuple[Device, Reading]]) -> str:
    """The `/metrics` text of dcgm-exporter for a node: HELP/TYPE then one sample per GPU, labels in its order."""
    lines = []
    rows = [(device, reading, values(device, reading)) for device, reading in readings]
    for name, help_ in COUNTERS:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        for device, _reading, counters in rows:
            labels = [str(device.index), device.uuid, device.bus_id, f"nvidia{device.index}", device.name,
                      node_name, DRIVER_VERSION]
            pairs = list(zip(LABELS, labels, strict=True))
            if device.holder is not None:  # the pod-resources mapping labels GPUs held by a pod
                pairs += list(zip(HOLDER_LABELS, (device.holder[2], device.holder[0], device.holder[1]), strict=True))
            text = ",".join(f'{k}="{v}"' for k, v in pairs)
            value = counters[name]
            lines.append(f"{name}{{{text}}} {value:g}" if isinstance(value, float) else f"{name}{{{text}}} {value}")
    return "".join(line + "\n" for line in lines)


class DcgmExporter:
    """The Workload of a dcgm-exporter pod: `/metrics` for the GPUs of the node it runs on."""

    def __init__(self, ctx: PodContext, node_of: Callable[[str, str], str | None],
                 readings: Callable[[str], list[tuple[Device, Reading]]]):
        self.ctx, self.node_of, self.readings = ctx, node_of, readings
        self._runner: web.AppRunner | None = None
        self._logs = ["Starting dcgm-exporter", f"DCGM successfully initialized! (kubesim, driver {DRIVER_VERSION})",
                      "Collecting DCP Metrics", f"Starting webserver on :{PORT}"]

    def startup_seconds(self) -> float:
        return 1.0

    def logs(self) -> list[str]:
        return list(self._logs)

    async def _metrics(self, request: web.Request) -> web.Response:
        node = self.node_of(self.ctx.namespace, self.ctx.pod_name) or ""
        return web.Response(text=exposition(node, self.readings(node)), content_type="text/plain")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    def probe(self, method: str, path: str) -> int | None:
        """The kubelet's readiness probe answered in-process (what `/health` answers over HTTP): with one
        exporter per GPU node, an HTTP round trip each period was a fifth of kubesim's time at 500 nodes."""
        return 200 if method == "GET" and path == "/health" else None

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        return await listen_on_loopback(self._runner)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def exporter_pod(node: dict) -> dict:
    """The dcgm-exporter pod for one node, bound to it as the DaemonSet's pod would be."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{APP}-{name}", "namespace": NAMESPACE,
                     "labels": {"app": APP, "app.kubernetes.io/name": "dcgm-exporter"}},
        "spec": {
            "nodeName": name,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": APP, "image": IMAGE,
                            "ports": [{"name": "metrics", "containerPort": PORT, "protocol": "TCP"}],
                            "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}},
                            "resources": {"requests": {"cpu": "10m", "memory": "128Mi"}}}],
        },
    }


def exporter_service() -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": APP, "namespace": NAMESPACE, "labels": {"app": APP}},
            "spec": {"selector": {"app": APP},
                     "ports": [{"name": "gpu-metrics", "port": PORT, "targetPort": PORT, "protocol": "TCP"}]}}


async def install_exporters(api, nodes: list[dict]) -> None:
    """Create the namespace, Service and one exporter pod per NVIDIA GPU node (those missing)."""
    if await api.get("v1/namespaces", None, NAMESPACE) is None:
        await api.create("v1/namespaces", {"metadata": {"name": NAMESPACE}})
    if await api.get("v1/services", NAMESPACE, APP) is None:
        await api.create("v1/services", exporter_service())
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if labels.get("nvidia.com/gpu.present") != "true":
            continue
        pod = exporter_pod(node)
        if await api.get("v1/pods", NAMESPACE, pod["metadata"]["name"]) is None:
            await api.create("v1/pods", pod)
