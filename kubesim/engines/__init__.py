"""Simulated inference engines and routers for kubesim pods.

The kubelet calls `workload_for(ctx)`: a vLLM image (`vllm/vllm-openai:*`) gets a simulated vLLM (the real one
on a cpu-real node, kubesim/engines/real.py), an
SGLang image (`lmsysorg/sglang:*`) a simulated SGLang server (or the SGLang router when the command
runs `sglang_router.launch_router`), the vLLM production-stack router image (`lmcache/lmstack-router:*`)
and the SGLang router images a simulated router; anything else returns None (the generic workload).
A bad command line raises WorkloadExit from `start()`, so the pod crash-loops with the engine's message.
The service proxy's routing policies (`kubesim.io/routing-policy`) come from
`kubesim.engines.routing.service_proxy_policies()`, which the cluster assembly passes to the proxies.
"""

from __future__ import annotations

from dataclasses import replace

from kubesim.workload import PodContext, Workload, WorkloadExit

VLLM_IMAGES = ("vllm/vllm-openai", "docker.io/vllm/vllm-openai")
SGLANG_IMAGES = ("lmsysorg/sglang", "docker.io/lmsysorg/sglang")
PSTACK_ROUTER_IMAGES = (
    "lmcache/lmstack-router",
    "docker.io/lmcache/lmstack-router",
    "ghcr.io/vllm-project/production-stack/router",
)
SGLANG_ROUTER_IMAGES = (
    "lmsysorg/sglang-router",
    "lmsysorg/sgl-model-gateway",
    "docker.io/lmsysorg/sglang-router",
)


def image_repo(image: str) -> str:
    """`repo` of `repo:tag` or `repo@sha256:…` (a registry port's colon is kept)."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    return repo


def engine_kind(container: dict) -> str | None:
    """'vllm', 'sglang', 'pstack-router', 'sglang-router' or None for a container spec."""
    repo = image_repo(container.get("image", ""))
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if repo in SGLANG_IMAGES:
        return "sglang-router" if any("sglang_router" in w or "launch_router" in w for w in words) else "sglang"
    if repo in VLLM_IMAGES:
        return "vllm"
    if repo in PSTACK_ROUTER_IMAGES:
        return "pstack-router"
    if repo in SGLANG_ROUTER_IMAGES:
        return "sglang-router"
    return None


class _FailedWorkload:
    """A container whose command line the engine rejects: it prints the error and exits on start."""

    def __init__(self, exc: WorkloadExit):
        self.exc = exc

    def startup_seconds(self) -> float:
        return 0.0

    async def start(self) -> int:
        raise self.exc

    async def stop(self) -> None:
        return None

    def logs(self) -> list[str]:
        return list(self.exc.logs)


def engine_spec_for(ctx: PodContext):
    """The EngineSpec of a vLLM or SGLang container, as its server would start (raises WorkloadExit with the
    engine's own message when the command line is refused, LookupError when the image is no engine)."""
    from kubesim.engines import config, flags

    kind = engine_kind(ctx.container)
    argv = flags.command_line(ctx.container, ctx.env)
    version = flags.image_version(ctx.container.get("image") or "")  # the engine of that tag's version
    if kind == "vllm":
        return config.vllm_spec(flags.parse_vllm(argv, version)[0], ctx)
    if kind == "sglang":
        return config.sglang_spec(flags.parse_sglang(argv, version)[0], ctx)
    raise LookupError(f"{ctx.container.get('image')} is not a simulated engine image")


def workload_for(ctx: PodContext) -> Workload | None:
    """The simulated workload for a pod's container, or None when kubesim does not simulate its image."""
    kind = engine_kind(ctx.container)
    if kind is None:
        return None
    from kubesim.engines import flags, real, router, server

    try:
        if (workload := real.real_workload(ctx)) is not None:
            return workload
        argv = flags.command_line(ctx.container, ctx.env)
        if kind in ("vllm", "sglang"):
            fault = ctx.fault
            if fault is not None and fault.crash_on_start:
                raise WorkloadExit("kubesim fault: the engine crashed on start (crash_on_start selects this pod)")
            spec = engine_spec_for(ctx)
            if fault is not None and fault.slowdown != 1.0:
                spec = replace(spec, core=replace(spec.core, slowdown=fault.slowdown))
            return server.EngineWorkload(spec, seed=ctx.seed, error_rate=fault.error_rate if fault else 0.0)
        return router.router_workload(kind, argv, ctx)
    except WorkloadExit as exc:
        return _FailedWorkload(exc)

