"""The engines' Prometheus families (engines.md sections 1-2), one CollectorRegistry per engine.

`VllmMetrics` and `SglangMetrics` are the core's observers: they count what the step loop does, so every
histogram count equals the requests served and every token counter the `usage` returned.
"""

from __future__ import annotations

import bisect
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kubesim.engines.core import EngineCore, EngineObserver, Request

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
    ):
        # Data-parallel engines of one server share the registry and families; each has its children.
        self.registry = shared.registry if shared is not None else CollectorRegistry()
        self._families: dict = shared._families if shared is not None else {}
        self.enabled = log_stats
        r = self.registry
        names = ["model_name", "engine"]
        lv = (model_name, engine)
        self.lv = lv
        custom = custom_buckets or {}

        def b(family: str, default: list) -> list:
            return custom.get(family, default)

        if not log_stats:
            return
        self.running = self._family(
            Gauge, "vllm:num_requests_running", "Number of requests in model execution batches.", names, registry=r
        ).labels(*lv)
        self.waiting = self._family(
            Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", names, registry=r
        ).labels(*lv)
        wbr = self._family(
            Gauge,
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting, by reason.",
            [*names, "reason"],
            registry=r,
        )
        self.waiting_capacity = wbr.labels(*lv, "capacity")
        self.waiting_deferred = wbr.labels(*lv, "deferred")
        self.waiting_deferred.set(0)
        if kv_consumer:
            fetch = self._family(
                Gauge,
                "vllm:num_requests_kv_fetch_by_stage",
                "Requests fetching remote KV, by stage.",
                [*names, "stage"],
                registry=r,
            )
            self.fetch_in_progress = fetch.labels(*lv, "in_progress")
            fetch.labels(*lv, "waiting_to_start").set(0)
            fetch.labels(*lv, "completed_waiting").set(0)
        else:
            self.fetch_in_progress = None
        self.kv_usage = self._family(
            Gauge, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", names, registry=r
        ).labels(*lv)
        sleep = self._family(
            Gauge, "vllm:engine_sleep_state", "Engine sleep state.", [*names, "sleep_state"], registry=r
        )
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
        info.labels(*cache_info.values(), engine).set(1)
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
        self.prefix_queries = self._family(
            Counter, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of tokens.", names, registry=r
        ).labels(*lv)
        self.prefix_hits = self._family(
            Counter, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of tokens.", names, registry=r
        ).labels(*lv)
        self._family(
            Counter,
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries, in tokens.",
            names,
            registry=r,
        ).labels(*lv)
        self._family(
            Counter, "vllm:external_prefix_cache_hits", "External prefix cache hits, in tokens.", names, registry=r
        ).labels(*lv)
        self.preemptions = self._family(
            Counter, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", names, registry=r
        ).labels(*lv)
        self.prompt_tokens = self._family(
            Counter, "vllm:prompt_tokens", "Number of prefill tokens processed.", names, registry=r
        ).labels(*lv)
        self.generation_tokens = self._family(
            Counter, "vllm:generation_tokens", "Number of generation tokens processed.", names, registry=r
        ).labels(*lv)
        by_source = self._family(
            Counter,
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [*names, "source"],
            registry=r,
        )
        self.prompt_local = by_source.labels(*lv, "local_compute")
        self.prompt_hit = by_source.labels(*lv, "local_cache_hit")
        self.prompt_external = by_source.labels(*lv, "external_kv_transfer")
        self.prompt_cached = self._family(
            Counter, "vllm:prompt_tokens_cached", "Number of cached prompt tokens.", names, registry=r
        ).labels(*lv)
        cached_src = self._family(
            Counter,
            "vllm:prompt_tokens_cached_by_source",
            "Number of cached prompt tokens by source.",
            [*names, "source"],
            registry=r,
        )
        self.cached_device = cached_src.labels(*lv, "device")
        for src in ("host", "p2p", "disk", "external_unspecified"):
            cached_src.labels(*lv, src)
        success = self._family(
            Counter,
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=r,
        )
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
            self._family(Counter, f"vllm:{name}", f"Estimated {name.replace('_', ' ')}.", names, registry=r).labels(*lv)

        def hist(name, doc, buckets):
            return self._family(Histogram, name, doc, names, buckets=buckets, registry=r).labels(*lv)

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
        self.prefix_queries.inc(req.num_tokens)
        self.prefix_hits.inc(hit_tokens)

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
        self.prompt_tokens.inc(req.prompt_len)
        self.generation_tokens.inc(req.generated)
        if req.remote_kv:
            self.prompt_external.inc(req.prompt_len)
        else:
            self.prompt_local.inc(req.prompt_len - cached)
            self.prompt_hit.inc(cached)
        self.prompt_cached.inc(cached)
        self.cached_device.inc(cached)
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
            if self.fetch_in_progress is not None:
                self.fetch_in_progress.set(len(core.transferring))
            if self.lora_info is not None:
                # Adapters of the running and the waiting requests, as vLLM's scheduler stats report them.
                running = ",".join(sorted({r.lora for r in core.running if r.lora}))
                waiting = ",".join(sorted({r.lora for r in core.waiting if r.lora}))
                self.lora_info.clear()
                self.lora_info.labels(str(self.max_loras), running, waiting).set(time.time())


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
    ):
        self.registry = r = CollectorRegistry()
        b = buckets or {}
        s = (model_name, engine_type, "0", "0", "0")
        t = (model_name, engine_type)
        self.s, self.t = s, t

        def sg(name, doc):
            return Gauge(f"sglang:{name}", doc, SG_SCHED_LABELS, registry=r).labels(*s)

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
        eff = Counter(
            "sglang:prefill_effective_tokens",
            "Prefill tokens by where they came from.",
            [*SG_SCHED_LABELS, "mode"],
            registry=r,
        )
        self.eff_input = eff.labels(*s, "input")
        self.eff_device = eff.labels(*s, "device_hit")
        eff.labels(*s, "host_hit")
        eff.labels(*s, "storage_hit")
        rt = Counter("sglang:realtime_tokens", "Tokens processed, by mode.", [*SG_SCHED_LABELS, "mode"], registry=r)
        self.rt_compute = rt.labels(*s, "prefill_compute")
        self.rt_cache = rt.labels(*s, "prefill_cache")
        self.rt_decode = rt.labels(*s, "decode")
        self.queue_time = Histogram(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            SG_SCHED_LABELS,
            buckets=SGLANG_QUEUE,
            registry=r,
        ).labels(*s)
        # Tokenizer-manager families
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens",
            "Number of prefill tokens processed.",
            [*SG_TOK_LABELS, "is_streaming"],
            registry=r,
        )
        self.generation_tokens = Counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            [*SG_TOK_LABELS, "is_streaming"],
            registry=r,
        )
        self.num_requests = Counter(
            "sglang:num_requests",
            "Number of requests processed.",
            [*SG_TOK_LABELS, "is_streaming"],
            registry=r,
        )
        self.cached_tokens = Counter(
            "sglang:cached_tokens",
            "Number of cached prompt tokens.",
            [*SG_TOK_LABELS, "cache_source"],
            registry=r,
        ).labels(*t, "total")
        self.aborted = Counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", SG_TOK_LABELS, registry=r
        ).labels(*t)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            [*SG_TOK_LABELS, "is_streaming"],
            buckets=b.get("ttft", SGLANG_TTFT),
            registry=r,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            SG_TOK_LABELS,
            buckets=b.get("itl", SGLANG_ITL),
            registry=r,
        ).labels(*t)
        self.tpot = Histogram(
            "sglang:request_time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            [*SG_TOK_LABELS, "is_streaming"],
            buckets=b.get("itl", SGLANG_ITL),
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency.",
            [*SG_TOK_LABELS, "is_streaming"],
            buckets=b.get("e2e", SGLANG_E2E),
            registry=r,
        )
        self.last_prefill_hits = 0
        self.last_prefill_input = 0

    def _st(self, req: Request) -> tuple[str, str, str]:
        return (*self.t, "true" if req.stream else "false")

    def on_admit(self, req: Request, hit_tokens: int, now: float) -> None:
        computed = req.num_tokens - hit_tokens
        self.eff_input.inc(computed)
        self.eff_device.inc(hit_tokens)
        self.rt_compute.inc(computed)
        self.rt_cache.inc(hit_tokens)
        self.cache_hit_rate.set(hit_tokens / (computed + hit_tokens) if computed + hit_tokens else 0.0)
        if req.cached_tokens == hit_tokens and req.preemptions == 0:
            observe_many(self.queue_time, now - req.arrival)

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
        self.cached_tokens.inc(max(req.cached_tokens, 0))
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
        self.num_decode_transfer_queue_reqs.set(len(core.transferring))
        return generate_latest(self.registry)
