"""The HTTP face of a simulated engine: OpenAI endpoints, health, LoRA and /metrics on a loopback port.

`EngineWorkload` implements kubesim's Workload protocol; vLLM and SGLang differ in their paths, error
shapes, metrics and start-up behaviour, which `spec.kind` selects. The inference handlers are in `inference`.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import replace

from aiohttp import web
from prometheus_client import generate_latest

from kubesim.engines.config import SGLANG_VERSION, VLLM_VERSION, EngineSpec
from kubesim.engines.core import Clock, EngineCore
from kubesim.engines.inference import InferenceHandlers
from kubesim.engines.metrics import VllmMetrics
from kubesim.engines.request import Request, output_length
from kubesim.engines.sglang_metrics import SglangMetrics
from kubesim.engines.sleep import SleepingEngine
from kubesim.engines.tokenizer import tokenize
from kubesim.workload import listen_on_loopback

# Engines running in this process by base URL, so an in-process router can read their load directly.
LOCAL_ENGINES: dict[str, EngineWorkload] = {}


class EngineWorkload(InferenceHandlers, SleepingEngine):
    """One simulated vLLM or SGLang server (Workload protocol)."""

    def __init__(self, spec: EngineSpec, *, seed: int = 0, error_rate: float = 0.0):
        self.spec = spec
        # A fault's share of inference requests answered 500 before they reach the engine (EngineFault).
        self.error_rate = error_rate
        self._fault_rng = random.Random(seed)
        self.seed = spec.core.seed if spec.core.seed is not None else seed  # --seed, else the pod seed
        self.clock = Clock(spec.time_scale)
        self.core: EngineCore | None = None  # the first (data-parallel rank 0) core
        self.cores: list[EngineCore] = []
        self.engine_metrics: list = []
        self.metrics: VllmMetrics | SglangMetrics | None = None
        self._runner: web.AppRunner | None = None
        self._ready_at = 0.0
        self._logs = list(spec.logs)
        self.loras: dict[str, str] = dict(spec.lora_modules)
        self._ids = itertools.count(1)  # per server, so a seed reproduces the same outputs
        self.base_url = ""
        self.port = 0

    # -- Workload protocol ---------------------------------------------------------------------------------
    def startup_seconds(self) -> float:
        return self.spec.startup_s

    def startup_phases(self):
        """The start-up's phases (capacity.startup.Phases) the kubelet sleeps through, an Event for each."""
        return self.spec.phases

    def logs(self) -> list[str]:
        return list(self._logs)

    async def start(self) -> int:
        spec = self.spec
        if spec.kind == "vllm":
            cfg = spec.core
            metrics = []
            for i in range(spec.data_parallel):
                metrics.append(
                    VllmMetrics(
                        spec.served_names[0],
                        str(i),
                        cfg.max_model_len,
                        spec.cache_info,
                        spec.enable_lora,
                        spec.max_loras,
                        cfg.kv_role == "consumer",
                        spec.log_stats,
                        spec.custom_buckets,
                        shared=metrics[0] if metrics else None,
                        tier_backend=cfg.cpu_tier.backend if cfg.cpu_tier is not None and cfg.prefix_caching else None,
                        speculative=cfg.spec_tokens > 0,
                    )
                )
            self.engine_metrics = metrics
            self.metrics = metrics[0]
            self.cores = [EngineCore(replace(cfg, seed=cfg.seed + i), self.clock, m) for i, m in enumerate(metrics)]
        else:
            engine_type = {"prefill": "prefill", "decode": "decode"}.get(spec.pd_role or "", "unified")
            consts = {
                "max_total_num_tokens": spec.max_total_tokens,
                "page_size": spec.page_size,
                "num_pages": spec.max_total_tokens // spec.page_size,
                "context_len": spec.core.max_model_len,
                "kv_cache_memory_usage_gb": spec.max_total_tokens * spec.core.kv_bytes_per_token_rank / 1024**3,
            }
            tier = spec.core.cpu_tier if spec.core.prefix_caching else None
            self.metrics = SglangMetrics(spec.served_names[0], engine_type, consts, spec.sglang_buckets,
                                         host_tokens=tier.blocks * spec.core.block_size if tier else 0,
                                         tokens_per_block=spec.core.block_size)
            self.engine_metrics = [self.metrics]
            self.cores = [EngineCore(spec.core, self.clock, self.metrics)]
        self.core = self.cores[0]
        for core in self.cores:
            core.start()
        app = web.Application(client_max_size=64 * 1024**2,
                              middlewares=[self._fault_errors] if self.error_rate else [])
        self._routes(app)
        # As vLLM does, a client that disconnects aborts its request, non-streamed ones included.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        self.port = await listen_on_loopback(self._runner)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._ready_at = time.monotonic() + spec.startup_s
        LOCAL_ENGINES[self.base_url] = self
        return self.port

    @web.middleware
    async def _fault_errors(self, request: web.Request, handler):
        if request.method == "POST" and request.path.startswith("/v1/") and self._fault_rng.random() < self.error_rate:
            return web.json_response({"error": {"message": "kubesim fault: injected engine error",
                                                "type": "InternalServerError", "code": 500}}, status=500)
        return await handler(request)

    async def stop(self) -> None:
        LOCAL_ENGINES.pop(self.base_url, None)
        for core in self.cores:
            await core.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def ready(self) -> bool:
        return time.monotonic() >= self._ready_at

    # -- direct submission (routers in-process and the benchmark) -----------------------------------------
    def submit(self, req: Request) -> EngineCore:
        """Queue `req` on the least loaded data-parallel core (the one core without -dp)."""
        core = min(self.cores, key=lambda c: len(c.running) + len(c.waiting) + len(c.transferring))
        core.add(req)
        self.hold_if_paused(core, req)
        return core

    def _queue_full(self, prompt_len: int) -> web.Response | None:
        """A 503 when the waiting queue is at its configured limit (and the rejection counted)."""
        spec = self.spec
        waiting = sum(len(c.waiting) for c in self.cores)
        if spec.max_queued_requests is not None and waiting >= spec.max_queued_requests:
            if spec.kind == "vllm":
                return self._vllm_queue_full("reject_reqs", "max_num_queued_reqs", spec.max_queued_requests)
            return self._error(503, "The request queue is full.", "ServiceUnavailableError")
        if spec.max_queued_tokens is not None:
            queued = sum(r.prompt_len for c in self.cores for r in c.waiting)
            if queued + prompt_len > spec.max_queued_tokens:
                return self._vllm_queue_full("reject_tokens", "max_num_queued_tokens", spec.max_queued_tokens)
        return None

    def _vllm_queue_full(self, counter: str, setting: str, limit: int) -> web.Response:
        """vLLM's 503 for a full waiting queue, counted in the admission-rejection child `counter`."""
        if self.metrics.enabled:
            getattr(self.metrics, counter).inc()
        return self._error(503, f"The waiting queue is full ({setting}={limit}).", "ServiceUnavailableError")

    def load(self) -> int:
        """Requests running, waiting or receiving KV across the cores."""
        return sum(len(c.running) + len(c.waiting) + len(c.transferring) for c in self.cores)

    def gpu_usage(self) -> tuple[float, float]:
        """(fraction of each GPU's memory held, GPU utilization 0..1) as nvidia-smi and DCGM see this server:
        vLLM holds `--gpu-memory-utilization` of every GPU, SGLang `--mem-fraction-static`; utilization follows
        the share of the batch in use while requests run."""
        held = float(self.spec.cache_info["gpu_memory_utilization"]) if self.spec.kind == "vllm" \
            else self.spec.mem_fraction
        running = sum(len(c.running) for c in self.cores)
        if not running:
            return held, 0.0
        capacity = sum(c.cfg.max_num_seqs for c in self.cores) or 1
        return held, min(1.0, 0.6 + 0.4 * running / capacity)

    def kv_usage(self) -> float:
        return sum(c.kv_usage() for c in self.cores) / len(self.cores) if self.cores else 0.0

    def new_request(
        self,
        prompt_tokens: list[int],
        max_tokens: int,
        *,
        ignore_eos: bool = True,
        stream: bool = False,
        remote_kv: bool = False,
    ) -> Request:
        rid = f"req-{next(self._ids)}"
        out = output_length(self.seed, rid, max_tokens, ignore_eos)
        return Request(rid, prompt_tokens, out, max_tokens, stream=stream, remote_kv=remote_kv)

    # -- HTTP ------------------------------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        kind = self.spec.kind
        r = app.router
        r.add_get("/health", self._health)
        r.add_get("/v1/models", self._models)
        r.add_post("/v1/completions", self._completions)
        r.add_post("/v1/chat/completions", self._chat)
        r.add_get("/metrics", self._metrics)
        self._sleep_routes(r)
        if kind == "vllm":
            r.add_get("/ping", self._health)
            r.add_post("/ping", self._health)
            r.add_get("/version", self._version)
            if self.spec.runtime_lora:
                r.add_post("/v1/load_lora_adapter", self._load_lora)
                r.add_post("/v1/unload_lora_adapter", self._unload_lora)
        else:
            r.add_get("/ready", self._ready)
            r.add_post("/generate", self._generate)
            r.add_get("/health_generate", self._health_generate)
            r.add_get("/v1/models/{model:.+}", self._model_one)
            r.add_get("/model_info", self._model_info)
            r.add_get("/get_model_info", self._model_info)
            r.add_get("/server_info", self._server_info)
            r.add_get("/v1/loads", self._loads)
            r.add_post("/load_lora_adapter", self._load_lora)
            r.add_post("/unload_lora_adapter", self._unload_lora)

    def _error(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        if self.spec.kind == "vllm":
            body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
        else:
            body = {"object": "error", "message": message, "type": kind, "param": param, "code": status}
        return web.json_response(body, status=status)

    def _starting(self) -> web.Response | None:
        if not self.ready():
            return web.Response(status=503, text="Service Unavailable: model is loading")
        return None

    async def _health(self, request: web.Request) -> web.Response:
        if not self.ready():
            return web.Response(status=503)
        return web.Response(status=200)

    async def _ready(self, request: web.Request) -> web.Response:
        if not self.ready():
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ready"})

    async def _health_generate(self, request: web.Request) -> web.Response:
        if not self.ready():
            return web.Response(status=503)
        req = self.new_request(tokenize("health"), 1)
        self.submit(req)
        await req.done
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    def _model_cards(self) -> list[dict]:
        created = int(time.time())
        owner = "vllm" if self.spec.kind == "vllm" else "sglang"
        cards = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": owner,
                "root": self.spec.model,
                "parent": None,
                "max_model_len": self.spec.core.max_model_len,
            }
            for name in self.spec.served_names
        ]
        for name, path in self.loras.items():
            cards.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": owner,
                    "root": path,
                    "parent": self.spec.served_names[0],
                    "max_model_len": self.spec.core.max_model_len,
                }
            )
        return cards

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": self._model_cards()})

    async def _model_one(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        for card in self._model_cards():
            if card["id"] == name:
                return web.json_response(card)
        return self._error(404, f"The model `{name}` does not exist.", "NotFoundError", "model")

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"model_path": self.spec.model, "tokenizer_path": self.spec.model, "is_generation": True}
        )

    async def _server_info(self, request: web.Request) -> web.Response:
        s = self.spec
        return web.json_response(
            {
                "version": SGLANG_VERSION,
                "model_path": s.model,
                "served_model_name": s.served_names[0],
                "tp_size": s.core.tp,
                "max_total_num_tokens": s.max_total_tokens,
                "mem_fraction_static": s.mem_fraction,
                "context_length": s.core.max_model_len,
                "max_running_requests": s.core.max_num_seqs,
                "chunked_prefill_size": s.core.max_num_batched_tokens,
                "disaggregation_mode": s.pd_role or "null",
            }
        )

    async def _loads(self, request: web.Request) -> web.Response:
        loads = [
            {
                "dp_rank": i,
                "num_reqs": len(core.running) + len(core.waiting),
                "num_waiting_reqs": len(core.waiting),
                "num_tokens": sum(r.num_tokens for r in core.running),
            }
            for i, core in enumerate(self.cores)
        ]
        return web.json_response({"loads": loads})

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.spec.kind == "sglang":
            if not self.spec.enable_metrics:
                return web.Response(status=404, text="Not Found")
            body = self.metrics.exposition(self.core, self.spec.core.block_size, self.spec.max_total_tokens)
        else:
            for metrics, core in zip(self.engine_metrics, self.cores, strict=True):
                metrics.update(core)
            body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _load_lora(self, request: web.Request) -> web.Response:
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not self.spec.enable_lora:
            msg = (
                "LoRA is not enabled. Please set --enable-lora."
                if self.spec.kind == "sglang"
                else "LoRA is not enabled in this engine."
            )
            return self._error(400, msg)
        if not name or not path:
            return self._error(400, "Both 'lora_name' and 'lora_path' must be provided.")
        if name in self.loras and not body.get("load_inplace"):
            return self._error(400, f"The lora adapter '{name}' has already been loaded.", param="lora_name")
        self.loras[name] = path
        self._logs.append(f"INFO Loaded new LoRA adapter: name '{name}', path '{path}'")
        if self.spec.kind == "sglang":
            return web.json_response({"success": True, "error_message": "", "loaded_adapters": dict(self.loras)})
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload_lora(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = body.get("lora_name")
        if name not in self.loras:
            return self._error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError", "lora_name")
        del self.loras[name]
        for core in self.cores:  # its weights leave host memory: using it again loads it again
            core.loaded_loras.pop(name, None)
        if self.spec.kind == "sglang":
            return web.json_response({"success": True, "error_message": "", "loaded_adapters": dict(self.loras)})
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")
