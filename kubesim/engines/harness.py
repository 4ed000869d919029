"""Run engine and router workloads without a cluster: for tests, the benchmark and local experiments."""

from __future__ import annotations

import asyncio

import aiohttp

from kubesim.engines import workload_for
from kubesim.workload import ClusterView, Endpoint, PodContext


def pod_context(
    image: str,
    args: list[str] | None = None,
    *,
    command: list[str] | None = None,
    gpu_key: str | None = "h100-sxm-80gb",
    gpu_count: int = 1,
    annotations: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    name: str = "engine-0",
    namespace: str = "default",
    seed: int = 0,
    fast_start: bool = True,
    cluster: ClusterView | None = None,
) -> PodContext:
    container = {"name": "main", "image": image, "args": list(args or [])}
    if command is not None:
        container["command"] = list(command)
    return PodContext(
        namespace=namespace,
        pod_name=name,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        container=container,
        env=dict(env or {}),
        gpu_key=gpu_key,
        gpu_count=gpu_count,
        seed=seed,
        fast_start=fast_start,
        cluster=cluster,
    )


async def start(ctx: PodContext, wait_ready: bool = True):
    """Start the workload the kubelet would run for `ctx` and wait until it reports ready."""
    w = workload_for(ctx)
    if w is None:
        raise LookupError(f"{ctx.container['image']} is not a simulated image")
    await w.start()
    if wait_ready:
        await asyncio.sleep(w.startup_seconds())
    return w


async def metrics_after(ctx: PodContext, requests: list[dict]) -> str:
    """The engine's `/metrics` text once `requests` (`/v1/completions` bodies, sent at once; the model is the
    one it serves) were answered: a real exposition with traffic in its counters and histograms."""
    workload = await start(ctx)
    try:
        model = workload.spec.served_names[0]
        async with aiohttp.ClientSession() as session:
            async def complete(body: dict) -> None:
                async with session.post(f"{workload.base_url}/v1/completions", json={"model": model, **body}) as r:
                    await r.read()

            await asyncio.gather(*(complete(body) for body in requests))
            async with session.get(f"{workload.base_url}/metrics") as response:
                return await response.text()
    finally:
        await workload.stop()


class StaticCluster:
    """A ClusterView over a fixed list of endpoints, selected by `key=value` label selectors."""

    def __init__(self, endpoints: list[Endpoint]):
        self.endpoints = endpoints

    def ready_endpoints(self, namespace: str, label_selector: str, port: int | None = None) -> list[Endpoint]:
        pairs = [p.split("=", 1) for p in label_selector.split(",") if "=" in p]
        return [e for e in self.endpoints if all(e.labels.get(k.strip()) == v.strip() for k, v in pairs)]
