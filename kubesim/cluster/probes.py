"""The kubelet's container probes (readiness and liveness, kubesim/cluster/pod_runtime.py): one run of an httpGet,
tcpSocket or exec probe with the words Kubernetes uses when it fails, and the probes' timing (period, initial delay),
at most a second apart under `--fast-start`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from kubesim.workload import Workload

FAST_START_MAX_SECONDS = 1.0


def period(probe: dict, fast_start: bool) -> float:
    seconds = float(probe.get("periodSeconds") or 10)
    return min(seconds, FAST_START_MAX_SECONDS) if fast_start else seconds


def initial_delay(probe: dict, fast_start: bool) -> float:
    seconds = float(probe.get("initialDelaySeconds") or 0)
    return min(seconds, FAST_START_MAX_SECONDS) if fast_start else seconds


async def run_probe(probe: dict, *, session: Callable[[], aiohttp.ClientSession], pod_ip: str, port: int | None,
                    workload: Workload | None) -> tuple[bool, str]:
    """Run an httpGet (2xx/3xx passes), tcpSocket (connects) or exec (always passes) probe of the container
    listening on loopback `port`, shown to the pod as `pod_ip`; `session` is the kubelet's HTTP session."""
    if port is None:
        return False, "container has no port"
    address = f"{pod_ip}:{port}"
    if probe.get("httpGet"):
        path = probe["httpGet"].get("path") or "/"
        # A workload with `probe` answers in-process (the generic workload, routers' /health): an HTTP
        # round trip per container per period was the kubelet's largest cost at thousands of pods.
        local = getattr(workload, "probe", None)
        status = local("GET", path) if local is not None else None
        if status is not None:
            if 200 <= status < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {status}"
        timeout = aiohttp.ClientTimeout(total=float(probe.get("timeoutSeconds") or 1) + 1)
        try:
            async with session().get(
                f"http://127.0.0.1:{port}{path}", timeout=timeout
            ) as response:
                if 200 <= response.status < 400:
                    return True, ""
                return False, f"HTTP probe failed with statuscode: {response.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            return False, f'Get "http://{address}{path}": {error}'
    if probe.get("tcpSocket"):
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False, f"dial tcp {address}: connect: connection refused"
        writer.close()
        return True, ""
    return True, ""
