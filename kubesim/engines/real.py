"""The real vLLM on cpu-real nodes: the kubelet runs vLLM's OpenAI server (CPU build) for a vLLM pod.

The pod's rendered arguments are kept but for paths, ports and memory: a path under one of the container's volume
mounts becomes the same path under the node's models folder (`--models-dir`), in the command line and, through the
`--middleware` the kubelet adds (kubesim/engines/mountmap.py), in adapter load requests; `--host` is loopback and
`--port` a free port, which the pod IP reaches as it reaches simulated engines, and `--gpu-memory-utilization` (on
the CPU build, the share of the host's memory) is the pod's memory limit over the host's. The server is started through
`enginevocab.vllm_launch` (docs/real-engines.md); Ready when its `/health` answers, its output is `kubectl logs`,
and its exit is the container's. `admission_refusal` is the kubelet's admission for these nodes: what the CPU
build cannot honour, or memory beyond what one engine may hold, fails the pod with the reason.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from enginevocab.cpubuild import CANONICAL, refusal
from kubesim.apiserver.quantities import parse_quantity
from kubesim.cluster.nodes import CPU_REAL, REAL_ENGINE_MEMORY_MIB, node_class
from kubesim.engines import engine_kind, flags
from kubesim.engines.mountmap import MOUNTS_ENV, ROOT_ENV, MountMap, map_path
from kubesim.workload import PodContext, WorkloadExit

KV_CACHE_GIB = "1"  # VLLM_CPU_KVCACHE_SPACE unless the pod sets it: 3.0 GB RSS for the tiny models
# Chosen by the kubelet: loopback, a free port, and the share of the host's memory the pod may hold, which the
# CPU build reads --gpu-memory-utilization as (and refuses to start when that much is not free).
CHOSEN_HERE = ("--host", "--port", "--gpu-memory-utilization")
HEALTH_POLL_SECONDS = 0.5
STOP_GRACE_SECONDS = 10.0
LOG_LINES = 2000
# Maps the lora_path of adapter load requests as server_argv maps the command line (kubesim/engines/mountmap.py).
MIDDLEWARE = f"{MountMap.__module__}.{MountMap.__name__}"


def _memory_mib(container: dict) -> float | None:
    resources = container.get("resources") or {}
    amounts = [parse_quantity(str(q)) for q in ((resources.get("limits") or {}).get("memory"),
                                                (resources.get("requests") or {}).get("memory")) if q]
    return max(amounts) / 2**20 if amounts else None


def admission_refusal(pod: dict, node: dict) -> str | None:
    """Why a cpu-real node refuses the pod, or None: GPU-only vLLM flags, SGLang, or memory past one engine's."""
    if node_class(node) != CPU_REAL:
        return None
    for container in pod["spec"].get("containers") or []:
        kind = engine_kind(container)
        if kind == "sglang":
            return f"container {container['name']}: SGLang has no CPU build that runs here (docs/real-engines.md)"
        if kind != "vllm":
            continue
        refused = refusal(flags.command_line(container, {}), f"{CPU_REAL} nodes")
        if refused:
            return f"container {container['name']}: {refused}"
        memory = _memory_mib(container)
        if memory is not None and memory > REAL_ENGINE_MEMORY_MIB:
            return (f"container {container['name']}: memory {memory:.0f}Mi is more than one real engine may hold "
                    f"on {CPU_REAL} nodes ({REAL_ENGINE_MEMORY_MIB}Mi)")
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_argv(ctx: PodContext, port: int) -> list[str]:
    """The server's arguments: the pod's after `vllm serve`, with mounted paths, host and port mapped."""
    argv = flags.command_line(ctx.container, ctx.env)
    rest = argv[argv.index("serve") + 1:] if "serve" in argv else argv[3:] if "-m" in argv[:2] else argv
    if rest and not rest[0].startswith("-"):
        rest = ["--model", *rest]  # `vllm serve MODEL`; the API server module takes --model
    mounts, root = _mounts(ctx), str(Path(ctx.models_dir or "."))

    def mapped(path: str) -> str:
        return map_path(path, mounts, root)

    out, i = [], 0
    while i < len(rest):
        word = rest[i]
        name, eq, value = word.partition("=")
        if CANONICAL.get(name) in CHOSEN_HERE:
            i += 1 if eq else 2
            continue
        out.append(word if word.startswith("-") and not eq else f"{name}={mapped(value)}" if eq else mapped(word))
        i += 1
    return [*out, "--middleware", MIDDLEWARE, "--host", "127.0.0.1", "--port", str(port),
            "--gpu-memory-utilization", memory_share(_memory_mib(ctx.container) or REAL_ENGINE_MEMORY_MIB)]


def _mounts(ctx: PodContext) -> list[str]:
    return [m["mountPath"] for m in ctx.container.get("volumeMounts") or []]


def memory_share(memory_mib: float) -> str:
    """`--gpu-memory-utilization` for the CPU build to hold `memory_mib`: that share of the host's memory."""
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{min(memory_mib * 2**20 / host, 0.9):.3f}"


class RealVllm:
    """A container running the real vLLM OpenAI server as a child process of kubesim."""

    def __init__(self, ctx: PodContext):
        self.ctx = ctx
        self.port: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self._reader: asyncio.Task | None = None

    def startup_seconds(self) -> float:
        return 0.0  # Ready when /health answers (until_ready)

    def logs(self) -> list[str]:
        return list(self._lines)

    def environment(self) -> dict[str, str]:
        """kubesim's environment, the pod's VLLM_* variables, the KV-cache size, and no download."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        env.update({k: v for k, v in self.ctx.env.items() if k.startswith("VLLM_")})
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        env[MOUNTS_ENV] = json.dumps(_mounts(self.ctx))
        env[ROOT_ENV] = str(Path(self.ctx.models_dir or "."))
        env.update(HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]))
        return env

    async def start(self) -> int:
        self.port = _free_port()
        argv = [sys.executable, "-m", "enginevocab.vllm_launch", *server_argv(self.ctx, self.port)]
        self._lines.append("kubesim cpu-real: " + " ".join(argv[3:]))
        self.process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=self.environment(),
            start_new_session=True)  # its own process group: stop() ends the engine core with it
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return self.port

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        async for line in self.process.stdout:
            self._lines.append(line.decode(errors="replace").rstrip())

    async def until_ready(self) -> None:
        """Return once /health answers 200; the process ending first is left to until_exit."""
        async with aiohttp.ClientSession() as session:
            while self.process is not None and self.process.returncode is None:
                try:
                    async with session.get(f"http://127.0.0.1:{self.port}/health",
                                           timeout=aiohttp.ClientTimeout(total=2)) as response:
                        if response.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError, OSError):
                    pass
                await asyncio.sleep(HEALTH_POLL_SECONDS)
        await asyncio.Event().wait()  # exited: never Ready

    async def until_exit(self) -> tuple[int, str]:
        assert self.process is not None
        code = await self.process.wait()
        if self._reader is not None:
            await self._reader
        last = next((line for line in reversed(self._lines) if line.strip()), "")
        return code or 1, f"vLLM exited with code {code}: {last}"

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, None)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                await asyncio.wait_for(process.wait(), wait)
                return
            except TimeoutError:
                continue


def real_workload(ctx: PodContext) -> RealVllm | None:
    """The real engine for a vLLM container on a cpu-real node, else None (simulated as usual)."""
    if ctx.node_class != CPU_REAL or engine_kind(ctx.container) != "vllm":
        return None
    if not ctx.models_dir:
        raise WorkloadExit("kubesim cpu-real: the cluster has no --models-dir for real engines' models")
    return RealVllm(ctx)
