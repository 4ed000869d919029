"""vLLM's Prometheus families (engines.md section 1), one CollectorRegistry per server; SGLang's are in
sglang_metrics.py.

`VllmMetrics` and `SglangMetrics` are the core's observers: they count what the step loop does, so every
histogram count equals the requests served and every token counter the `usage` returned.
"""

from __future__ import annotations

import bisect
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubesim.engines.core import EngineCore
from kubesim.engines.request import EngineObserver, Request

VLLM_TTFT = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
    20,
    40,
    80,
    160,
    640,
    2560,
]
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80]
VLLM_LAT = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680]
VLLM_ITERATION_TOKENS = [1] + [2**k for k in range(3, 15)]
VLLM_PARAMS_N = [1, 2, 5, 10, 20]
VLLM_NUM_PREEMPTIONS = [1, 2, 3, 4, 5, 10, 20]
VLLM_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


def one_two_five(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to and including `limit` (vLLM's token-count buckets)."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return out
            out.append(v)
        exp += 1


def observe_many(child, value: float, count: int = 1) -> None:
    """`count` observations of one value in one go (a decode step gives every sequence the same ITL);
    also a faster `observe` (bisect instead of a linear scan) for the per-request histograms."""
    i = bisect.bisect_left(child._upper_bounds, value)
    child._buckets[i].inc(count)
    child._sum.inc(value * count)


class VllmMetrics(EngineObserver):
    """vLLM 0.33's `vllm:` families with labels model_name and engine."""

    def __init__(
        self,
        model_name: str,
        engine: str,
        max_model_len: int,
        cache_info: dict[str, str],
        enable_lora: bool,
        max_loras: int,
        kv_consumer: bool,
        log_stats: bool,
        custom_buckets: dict | None = None,
        shared: VllmMetrics | None = None,
        tier_backend: str | None = None,
        speculative: bool = False,
    ):
        # Data-parallel engines of one server share the registry and families; each has its children.
        self.registry = shared.registry if shared is not None else CollectorRegistry()
        self._families: dict = shared._families if shared is not None else {}
        self.enabled = log_stats
        self.lv = (model_name, engine)
        if not log_stats:
            return
        custom = custom_buckets or {}
        # Registration order is exposition order: gauges, counters, then histograms, as vLLM lists them.
        self._gauges(cache_info, enable_lora, max_loras, kv_consumer)
        self._counters(model_name)
        self.spec = self._speculative() if speculative else None
        self._histograms(max_model_len, lambda family, default: custom.get(family, default))
        self._tier(tier_backend, model_name, cache_info)

    def _tier(self, backend: str | None, model_name: str, cache_info: dict[str, str]) -> None:
        """The CPU tier's families: the OffloadingConnector's, or LMCache's for the lmcache backend."""
        from kubesim.engines import tier_metrics

        def family(cls, name, doc, labels, **kwargs):
            return self._family(cls, name, doc, labels, registry=self.registry, **kwargs)

        self.block_size = int(cache_info.get("block_size", 16))
        self.native = tier_metrics.VllmNativeTier(family, self.lv) if backend == "native" else None
        self.lmcache = tier_metrics.LmcacheTier(family, model_name, self.lv[1]) if backend == "lmcache" else None
        self._host_hit = 0

    def _fam(self, cls, name: str, doc: str, *extra: str, **kwargs):
        """The family `name` labelled model_name, engine and then `extra`."""
        return self._family(cls, name, doc, ["model_name", "engine", *extra], registry=self.registry, **kwargs)

    def _one(self, cls, name: str, doc: str):
        """This engine's child of a family labelled by model_name and engine only."""
        return self._fam(cls, name, doc).labels(*self.lv)

    def _hist(self, name: str, doc: str, buckets: list):
        return self._fam(Histogram, name, doc, buckets=buckets).labels(*self.lv)

    def _gauges(self, cache_info: dict[str, str], enable_lora: bool, max_loras: int, kv_consumer: bool) -> None:
        fam, one, lv, r = self._fam, self._one, self.lv, self.registry
        self.running = one(Gauge, "vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = one(Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        wbr = fam(Gauge, "vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.", "reason")
        self.waiting_capacity = wbr.labels(*lv, "capacity")
        self.waiting_deferred = wbr.labels(*lv, "deferred")
        self.waiting_deferred.set(0)
        if kv_consumer:
            fetch = fam(Gauge, "vllm:num_requests_kv_fetch_by_stage", "Requests fetching remote KV, by stage.", "stage")
            self.fetch_in_progress = fetch.labels(*lv, "in_progress")
            fetch.labels(*lv, "waiting_to_start").set(0)
            fetch.labels(*lv, "completed_waiting").set(0)
        else:
            self.fetch_in_progress = None
        self.kv_usage = one(Gauge, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.sleep_state = sleep = fam(Gauge, "vllm:engine_sleep_state", "Engine sleep state.", "sleep_state")
        sleep.labels(*lv, "awake").set(1)
        sleep.labels(*lv, "weights_offloaded").set(0)
        sleep.labels(*lv, "discard_all").set(0)
        info = self._family(
            Gauge,
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [*cache_info, "engine"],
            registry=r,
        )
        info.labels(*cache_info.values(), lv[1]).set(1)
        if enable_lora:
            self.lora_info = self._family(
                Gauge,
                "vllm:lora_requests_info",
                "Running stats on lora requests.",
                ["max_lora", "running_lora_adapters", "waiting_lora_adapters"],
                registry=r,
            )
            self.max_loras = max_loras
        else:
            self.lora_info = None

    def _speculative(self) -> tuple:
        """vLLM's speculative decoding counters, registered only with a speculative config: drafts (one per
        sequence a step), drafted and accepted tokens, and accepted tokens by their position in the draft."""
        one = self._one
        return (one(Counter, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                one(Counter, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                one(Counter, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
                self._fam(Counter, "vllm:spec_decode_num_accepted_tokens_per_pos",
                          "Accepted tokens per draft position.", "position"))

    def on_spec_decode(self, drafted: int, accepted: int) -> None:
        if self.enabled and self.spec is not None:
            drafts, draft_tokens, accepted_tokens, per_pos = self.spec
            drafts.inc()
            draft_tokens.inc(drafted)
            accepted_tokens.inc(accepted)
            for position in range(accepted):
                per_pos.labels(*self.lv, str(position)).inc()

    def _counters(self, model_name: str) -> None:
        fam, one, lv, r = self._fam, self._one, self.lv, self.registry
        self.prefix_queries = one(Counter, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of tokens.")
        self.prefix_hits = one(Counter, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of tokens.")
        self.ext_queries = one(Counter, "vllm:external_prefix_cache_queries",
                               "External prefix cache queries, in tokens.")
        self.ext_hits = one(Counter, "vllm:external_prefix_cache_hits", "External prefix cache hits, in tokens.")
        self.preemptions = one(Counter, "vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = one(Counter, "vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = one(Counter, "vllm:generation_tokens", "Number of generation tokens processed.")
        by_source = fam(Counter, "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", "source")
        self.prompt_local = by_source.labels(*lv, "local_compute")
        self.prompt_hit = by_source.labels(*lv, "local_cache_hit")
        self.prompt_external = by_source.labels(*lv, "external_kv_transfer")
        self.prompt_cached = one(Counter, "vllm:prompt_tokens_cached", "Number of cached prompt tokens.")
        cached_src = fam(
            Counter, "vllm:prompt_tokens_cached_by_source", "Number of cached prompt tokens by source.", "source"
        )
        self.cached_device = cached_src.labels(*lv, "device")
        self.cached_host = cached_src.labels(*lv, "host")
        for src in ("p2p", "disk", "external_unspecified"):
            cached_src.labels(*lv, src)
        success = fam(Counter, "vllm:request_success", "Count of successfully processed requests.", "finished_reason")
        self.success = {reason: success.labels(*lv, reason) for reason in VLLM_FINISH_REASONS}
        rejections = self._family(
            Counter,
            "vllm:admission_rejections",
            "Requests rejected at admission.",
            ["model_name", "reason"],
            registry=r,
        )
        self.reject_reqs = rejections.labels(model_name, "max_num_queued_reqs")
        self.reject_tokens = rejections.labels(model_name, "max_num_queued_tokens")
        for name in (
            "estimated_flops_per_gpu",
            "estimated_read_bytes_per_gpu",
            "estimated_write_bytes_per_gpu",
        ):
            one(Counter, f"vllm:{name}", f"Estimated {name.replace('_', ' ')}.")

    def _histograms(self, max_model_len: int, b) -> None:
        """`b(family, default)` gives the buckets, the server's custom ones where it has them."""
        hist = self._hist
        self.ttft = hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            b("time_to_first_token", VLLM_TTFT),
        )
        self.itl = hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            b("inter_token_latency", VLLM_ITL),
        )
        self.tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            b("inter_token_latency", VLLM_ITL),
        )
        lat = b("request_latency", VLLM_LAT)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lat)
        self.queue = hist(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", lat
        )
        self.inference = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            lat,
        )
        self.prefill = hist(
            "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", lat
        )
        self.decode = hist(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", lat
        )
        tok = one_two_five(max_model_len)
        self.req_prompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok)
        self.req_gen = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tok)
        self.req_max_gen = hist(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tok,
        )
        self.req_max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tok
        )
        self.req_kv_computed = hist(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached).",
            tok,
        )
        self.iteration = hist(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            VLLM_ITERATION_TOKENS,
        )
        self.params_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", VLLM_PARAMS_N)
        self.req_preempt = hist(
            "vllm:request_num_preemptions", "Number of preemptions per request.", VLLM_NUM_PREEMPTIONS
        )

    def _family(self, cls, name: str, *args, **kwargs):
        """The family `name`, created once per registry."""
        fam = self._families.get(name)
        if fam is None:
            fam = self._families[name] = cls(name, *args, **kwargs)
        return fam

    # -- observer ------------------------------------------------------------------------------------------
    def on_admit(self, req: Request, hit_tokens: int, now: float) -> None:
        if not self.enabled:
            return
        if req.preemptions == 0:
            # vLLM 0.32 counts a preempted request's lookup when it is admitted again apart, outside these two
            # families (PrefixCacheStats.preempted_*), as bench/real_engine.py shows against the real engine.
            self.prefix_queries.inc(req.num_tokens)
            self.prefix_hits.inc(hit_tokens)
        if self.lmcache is not None:
            self.lmcache.lookup(req.num_tokens, hit_tokens, self._host_hit)
        self._host_hit = 0

    def on_tier_lookup(self, req: Request, host_hit_tokens: int) -> None:
        if self.enabled:
            self.ext_queries.inc(req.num_tokens)
            self.ext_hits.inc(host_hit_tokens)
            self._host_hit = host_hit_tokens

    def on_tier_load(self, blocks: int, nbytes: float, seconds: float) -> None:
        if self.enabled and self.native is not None:
            self.native.transfer("CPU_to_GPU", nbytes, seconds)
        elif self.enabled and self.lmcache is not None:
            observe_many(self.lmcache.time_to_retrieve, seconds)

    def on_tier_store(self, blocks: int, nbytes: float, seconds: float, evicted: int) -> None:
        if self.enabled and self.native is not None and blocks:
            self.native.transfer("GPU_to_CPU", nbytes, seconds)
        elif self.enabled and self.lmcache is not None:
            self.lmcache.store(blocks * self.block_size, seconds, evicted)

    def on_step(self, req_tokens: int, prefill_tokens: int, hit_tokens: int, duration: float) -> None:
        if self.enabled:
            observe_many(self.iteration, req_tokens)

    def on_tokens(self, itl: float, count: int) -> None:
        if self.enabled:
            observe_many(self.itl, itl, count)

    def on_first_token(self, req: Request) -> None:
        if self.enabled:
            observe_many(self.ttft, req.first_token - req.arrival)

    def on_preempt(self, req: Request) -> None:
        if self.enabled:
            self.preemptions.inc()

    def on_finish(self, req: Request) -> None:
        if not self.enabled:
            return
        self.success[req.finish_reason].inc()
        end = req.last_token
        observe_many(self.e2e, end - req.arrival)
        sched = req.first_scheduled if req.first_scheduled is not None else end
        observe_many(self.queue, sched - req.arrival)
        observe_many(self.inference, end - sched)
        first = req.first_token if req.first_token is not None else end
        observe_many(self.prefill, first - sched)
        observe_many(self.decode, end - first)
        if req.generated > 1:
            observe_many(self.tpot, (end - first) / (req.generated - 1))
        cached = max(req.cached_tokens, 0)
        host = req.host_cached_tokens  # loaded from the CPU tier through the KV connector
        self.prompt_tokens.inc(req.prompt_len)
        self.generation_tokens.inc(req.generated)
        if req.remote_kv:
            self.prompt_external.inc(req.prompt_len)
        else:
            self.prompt_local.inc(req.prompt_len - cached)
            self.prompt_hit.inc(cached - host)
            self.prompt_external.inc(host)
        self.prompt_cached.inc(cached)
        self.cached_device.inc(cached - host)
        self.cached_host.inc(host)
        observe_many(self.req_prompt, req.prompt_len)
        observe_many(self.req_gen, req.generated)
        observe_many(self.req_max_gen, req.max_tokens)
        observe_many(self.req_max_tokens, req.max_tokens)
        observe_many(self.req_kv_computed, req.prompt_len - cached)
        observe_many(self.params_n, 1)
        observe_many(self.req_preempt, req.preemptions)

    def update(self, core: EngineCore) -> None:
        """Set this engine's gauges from its core (at scrape time)."""
        if self.enabled:
            self.running.set(len(core.running))
            self.waiting.set(len(core.waiting) + len(core.transferring))
            self.waiting_capacity.set(len(core.waiting))
            self.kv_usage.set(core.kv_usage())
            if self.lmcache is not None and core.cpu is not None:
                self.lmcache.local_cache_usage.set(core.cpu.cfg.bytes(len(core.cpu.lru)))
            if self.fetch_in_progress is not None:
                self.fetch_in_progress.set(len(core.transferring))
            if self.lora_info is not None:
                # Adapters of the running and the waiting requests, as vLLM's scheduler stats report them.
                running = ",".join(sorted({r.lora for r in core.running if r.lora}))
                waiting = ",".join(sorted({r.lora for r in core.waiting if r.lora}))
                self.lora_info.clear()
                self.lora_info.labels(str(self.max_loras), running, waiting).set(time.time())

# The families the real vLLM 0.32.0 exports that the simulation does not, with the reason (bench/real_engine.py
# and tests/telemetry/test_real_engine.py list any other as a failure).
NOT_MODELLED: dict[str, str] = {
    "vllm:mm_cache_hits": "the multimodal (image/audio) input cache: the simulation serves text only",
    "vllm:mm_cache_queries": "the multimodal (image/audio) input cache: the simulation serves text only",
    "vllm:mm_cache_hits_created": "the _created sample of vllm:mm_cache_hits, not modelled with it",
    "vllm:mm_cache_queries_created": "the _created sample of vllm:mm_cache_queries, not modelled with it",
}
