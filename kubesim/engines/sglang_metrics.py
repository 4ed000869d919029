"""SGLang 0.5's Prometheus families (engines.md section 2): scheduler and tokenizer-manager metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kubesim.engines.core import EngineCore
from kubesim.engines.metrics import observe_many
from kubesim.engines.request import EngineObserver, Request

SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_ITL = [
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1,
    2,
    4,
    6,
    8,
]
SGLANG_E2E = [*SGLANG_TTFT, 600, 1200, 1800, 2400]
SGLANG_QUEUE = [
    0,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    3,
    4,
    5,
    10,
    15,
    20,
    30,
    40,
    50,
    60,
    70,
    80,
    90,
    100,
    200,
    300,
    400,
    500,
    600,
    700,
    800,
    900,
    1000,
    1200,
    1400,
    1600,
    1800,
    2000,
    2500,
    3000,
]
SGLANG_STAGE = [0.001 * 1.62**n for n in range(30)]


SG_SCHED_LABELS = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
SG_TOK_LABELS = ["model_name", "engine_type"]


class SglangMetrics(EngineObserver):
    """SGLang 0.5's `sglang:` scheduler and tokenizer families (only with --enable-metrics)."""

    def __init__(
        self,
        model_name: str,
        engine_type: str,
        cache_consts: dict[str, float],
        buckets: dict[str, list[float]] | None = None,
        host_tokens: int = 0,
        tokens_per_block: int = 16,
    ):
        self.registry = CollectorRegistry()
        self.s = (model_name, engine_type, "0", "0", "0")
        self.t = (model_name, engine_type)
        self._scheduler_gauges(cache_consts)
        self._scheduler_counters()
        self._tokenizer_families(buckets or {}, host_tokens)
        self.hicache = None
        if host_tokens:
            from kubesim.engines.tier_metrics import SglangHiCache

            self.hicache = SglangHiCache(self._sched, self.s)
            self.hicache.host_total.set(host_tokens)
        self._host_hit = 0
        self.unit = tokens_per_block  # the simulated pool's unit (config.sglang_spec), for the tier's token counts
        self.last_prefill_hits = 0
        self.last_prefill_input = 0

    def _sched(self, cls, name, doc, *extra, **kwargs):
        """A scheduler family `sglang:name`, labelled by SG_SCHED_LABELS and then `extra`."""
        return cls(f"sglang:{name}", doc, [*SG_SCHED_LABELS, *extra], registry=self.registry, **kwargs)

    def _tok(self, cls, name, doc, *extra, **kwargs):
        """A tokenizer-manager family `sglang:name`, labelled by SG_TOK_LABELS and then `extra`."""
        return cls(f"sglang:{name}", doc, [*SG_TOK_LABELS, *extra], registry=self.registry, **kwargs)

    def _gauge(self, name: str, doc: str):
        return self._sched(Gauge, name, doc).labels(*self.s)

    def _scheduler_gauges(self, cache_consts: dict[str, float]) -> None:
        """The scheduler's load, KV and queue gauges, and the cache constants it reports once."""
        sg = self._gauge
        self.num_running = sg("num_running_reqs", "The number of running requests.")
        self.num_queue = sg("num_queue_reqs", "The number of requests in the waiting queue.")
        self.token_usage = sg("token_usage", "The token usage.")
        self.full_token_usage = sg("full_token_usage", "The token usage of the full attention pool.")
        self.num_used_tokens = sg("num_used_tokens", "The number of used tokens.")
        self.kv_used = sg("kv_used_tokens", "KV tokens in use.")
        self.kv_available = sg("kv_available_tokens", "KV tokens available.")
        self.kv_evictable = sg("kv_evictable_tokens", "KV tokens held by the cache and evictable.")
        self.cache_hit_rate = sg("cache_hit_rate", "The prefix cache hit rate.")
        self.gen_throughput = sg("gen_throughput", "The generation throughput (token/s).")
        for key, value in cache_consts.items():
            sg(key, f"{key.replace('_', ' ')}.").set(value)
        for q in (
            "num_prefill_bootstrap_queue_reqs",
            "num_prefill_inflight_queue_reqs",
            "num_decode_prealloc_queue_reqs",
            "num_decode_transfer_queue_reqs",
        ):
            setattr(self, q, sg(q, f"The number of requests in the {q[4:-5].replace('_', ' ')}."))

    def _scheduler_counters(self) -> None:
        """Prefill tokens by source, tokens by mode, and the queue-time histogram."""
        s = self.s
        eff = self._sched(Counter, "prefill_effective_tokens", "Prefill tokens by where they came from.", "mode")
        self.eff_input = eff.labels(*s, "input")
        self.eff_device = eff.labels(*s, "device_hit")
        self.eff_host = eff.labels(*s, "host_hit")
        eff.labels(*s, "storage_hit")
        rt = self._sched(Counter, "realtime_tokens", "Tokens processed, by mode.", "mode")
        self.rt_compute = rt.labels(*s, "prefill_compute")
        self.rt_cache = rt.labels(*s, "prefill_cache")
        self.rt_decode = rt.labels(*s, "decode")
        self.queue_time = self._sched(
            Histogram, "queue_time_seconds", "Histogram of queueing time in seconds.", buckets=SGLANG_QUEUE
        ).labels(*s)

    def _tokenizer_families(self, b: dict[str, list[float]], host_tokens: int) -> None:
        """The tokenizer manager's token counters and latency histograms."""
        tok, t, streaming = self._tok, self.t, "is_streaming"
        self.prompt_tokens = tok(Counter, "prompt_tokens", "Number of prefill tokens processed.", streaming)
        self.generation_tokens = tok(Counter, "generation_tokens", "Number of generation tokens processed.", streaming)
        self.num_requests = tok(Counter, "num_requests", "Number of requests processed.", streaming)
        cached = tok(Counter, "cached_tokens", "Number of cached prompt tokens.", "cache_source")
        # With HiCache the cached tokens are broken down by where they were found; without, one `total`.
        self.cached_tokens = cached.labels(*t, "device" if host_tokens else "total")
        self.cached_host = cached.labels(*t, "host") if host_tokens else None
        self.aborted = tok(Counter, "num_aborted_requests", "Number of requests aborted.").labels(*t)
        itl_buckets = b.get("itl", SGLANG_ITL)
        ttft_doc, ttft_buckets = "Histogram of time to first token in seconds.", b.get("ttft", SGLANG_TTFT)
        self.ttft = tok(Histogram, "time_to_first_token_seconds", ttft_doc, streaming, buckets=ttft_buckets)
        itl_doc = "Histogram of inter-token latency in seconds."
        self.itl = tok(Histogram, "inter_token_latency_seconds", itl_doc, buckets=itl_buckets).labels(*t)
        tpot_doc = "Histogram of time per output token in seconds."
        self.tpot = tok(Histogram, "request_time_per_output_token_seconds", tpot_doc, streaming, buckets=itl_buckets)
        e2e_doc = "Histogram of End-to-end request latency."
        self.e2e = tok(Histogram, "e2e_request_latency_seconds", e2e_doc, streaming, buckets=b.get("e2e", SGLANG_E2E))

    def _st(self, req: Request) -> tuple[str, str, str]:
        return (*self.t, "true" if req.stream else "false")

    def on_admit(self, req: Request, hit_tokens: int, now: float) -> None:
        host, self._host_hit = self._host_hit, 0
        computed = req.num_tokens - hit_tokens - host
        self.eff_input.inc(computed)
        self.eff_device.inc(hit_tokens)
        self.eff_host.inc(host)
        self.rt_compute.inc(computed)
        self.rt_cache.inc(hit_tokens + host)
        self.cache_hit_rate.set((hit_tokens + host) / req.num_tokens if req.num_tokens else 0.0)
        if req.cached_tokens == hit_tokens + host and req.preemptions == 0:
            observe_many(self.queue_time, now - req.arrival)

    def on_tier_lookup(self, req: Request, host_hit_tokens: int) -> None:
        self._host_hit = host_hit_tokens

    def on_tier_load(self, blocks: int, nbytes: float, seconds: float) -> None:
        if blocks:
            self.hicache.loaded.inc(blocks * self.unit)
            observe_many(self.hicache.load_s, seconds)

    def on_tier_store(self, blocks: int, nbytes: float, seconds: float, evicted: int) -> None:
        if blocks:
            self.hicache.evicted.inc(blocks * self.unit)
            observe_many(self.hicache.evict_s, seconds)

    def on_tokens(self, itl: float, count: int) -> None:
        observe_many(self.itl, itl, count)
        self.rt_decode.inc(count)

    def on_first_token(self, req: Request) -> None:
        observe_many(self.ttft.labels(*self._st(req)), req.first_token - req.arrival)

    def on_finish(self, req: Request) -> None:
        st = self._st(req)
        if req.finish_reason == "abort":
            self.aborted.inc()
        self.num_requests.labels(*st).inc()
        self.prompt_tokens.labels(*st).inc(req.prompt_len)
        self.generation_tokens.labels(*st).inc(req.generated)
        cached = max(req.cached_tokens, 0)
        if self.cached_host is not None:
            self.cached_host.inc(req.host_cached_tokens)
            cached -= req.host_cached_tokens
        self.cached_tokens.inc(cached)
        observe_many(self.e2e.labels(*st), req.last_token - req.arrival)
        if req.generated > 1:
            observe_many(self.tpot.labels(*st), (req.last_token - req.first_token) / (req.generated - 1))

    def exposition(self, core: EngineCore, tokens_per_block: int, max_total_tokens: int) -> bytes:
        self.num_running.set(len(core.running))
        self.num_queue.set(len(core.waiting))
        usage = core.kv_usage()
        self.token_usage.set(usage)
        self.full_token_usage.set(usage)
        used_blocks = core.pool.capacity - core.pool.num_free
        used = min(max_total_tokens, used_blocks * tokens_per_block)
        evictable = core.pool.evictable() * tokens_per_block
        self.num_used_tokens.set(used)
        self.kv_used.set(used)
        self.kv_available.set(max_total_tokens - used)
        self.kv_evictable.set(min(evictable, max_total_tokens - used))
        self.gen_throughput.set(core.gen_throughput())
        if self.hicache is not None and core.cpu is not None:
            self.hicache.host_used.set(len(core.cpu.lru) * tokens_per_block)
        self.num_decode_transfer_queue_reqs.set(len(core.transferring))
        return generate_latest(self.registry)
