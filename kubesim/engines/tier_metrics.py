"""The CPU tier's Prometheus families, as each engine and backend exports them (checked against their sources).

Versions: the vLLM families are vLLM 0.33's (`enginevocab.vllm.VERSION`), whose OffloadingConnector
(`--kv-offloading-backend native`) exports the flat transfer families `vllm:kv_offload_{load,store}_{bytes,time}`
(counters) and `vllm:kv_offload_{load,store}_size` (histograms, bytes), and still the deprecated
`vllm:kv_offload_total_bytes`/`_total_time`/`_size` with `transfer_type`=CPU_to_GPU|GPU_to_CPU for the CPU spec
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py). Hits through any KV connector are
`vllm:external_prefix_cache_queries`/`_hits` (tokens; queries count every prompt token, as the local ones do)
and `prompt_tokens_by_source{source="external_kv_transfer"}`, `prompt_tokens_cached_by_source{source="host"}`.
With `--kv-offloading-backend lmcache` the connector is LMCacheConnectorV1 and the tier's own families are
LMCache's `lmcache:*` (lmcache/observability.py, PrometheusLogger: labels model_name, worker_id, role,
served_model_name), not `vllm:kv_offload_*`. SGLang 0.5 (`enginevocab.sglang.VERSION`) with
`--enable-hierarchical-cache` adds `sglang:hicache_host_used_tokens`/`_total_tokens` (gauges),
`sglang:evicted_tokens_total`/`load_back_tokens_total` (GPU to CPU and back, counters) and
`sglang:eviction_duration_seconds`/`load_back_duration_seconds` (histograms), plus the `host` sources of
`cached_tokens_total` and `prefill_effective_tokens_total{mode="host_hit"}`
(sglang/srt/observability/metrics_collector.py).

Not simulated: vLLM's lookup-delay histograms and `kv_offload_cpu_cache_usage_perc` (the share of the tier
pinned by transfers in flight, not how full it is: the control plane reads the tier's fill from the stored
bytes instead), LMCache's remote-backend and profiling families.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from kubesim.engines.metrics import observe_many

# vLLM's TRANSFER_SIZE_BUCKETS (bytes) and LMCache's time_to_retrieve/time_to_store buckets (seconds).
VLLM_TRANSFER_SIZE = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6]
LMCACHE_TIME = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
# SGLang's eviction and load-back duration buckets (seconds), 1 ms to 1 s.
SGLANG_TIER_DURATION = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04,
                        0.05, 0.1, 0.2, 0.5, 1.0]
LOAD, STORE = "CPU_to_GPU", "GPU_to_CPU"


class VllmNativeTier:
    """vLLM's OffloadingConnector families for one engine (`family` makes each family once per registry)."""

    def __init__(self, family, lv: tuple[str, str]):
        def fam(cls, name, doc, *extra, **kw):
            return family(cls, name, doc, ["model_name", "engine", *extra], **kw)

        self.load_bytes = fam(Counter, "vllm:kv_offload_load_bytes",
                              "Total bytes loaded from offload storage to GPU.").labels(*lv)
        self.load_time = fam(Counter, "vllm:kv_offload_load_time",
                             "Total load time from offload storage to GPU, in seconds.").labels(*lv)
        self.store_bytes = fam(Counter, "vllm:kv_offload_store_bytes",
                               "Total bytes stored from GPU to offload storage.").labels(*lv)
        self.store_time = fam(Counter, "vllm:kv_offload_store_time",
                              "Total store time from GPU to offload storage, in seconds.").labels(*lv)
        self.load_size = fam(Histogram, "vllm:kv_offload_load_size", "Histogram of KV offload load operation size, "
                             "in bytes.", buckets=VLLM_TRANSFER_SIZE).labels(*lv)
        self.store_size = fam(Histogram, "vllm:kv_offload_store_size", "Histogram of KV offload store operation "
                              "size, in bytes.", buckets=VLLM_TRANSFER_SIZE).labels(*lv)
        fam(Counter, "vllm:kv_offload_allocation_failure",
            "Number of KV offload store allocation attempts that failed.").labels(*lv)
        total_bytes = fam(Counter, "vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                          "transfer_type")
        total_time = fam(Counter, "vllm:kv_offload_total_time", "Total time measured by all KV offloading "
                         "operations", "transfer_type")
        size = fam(Histogram, "vllm:kv_offload_size", "Histogram of KV offload transfer size, in bytes.",
                   "transfer_type", buckets=VLLM_TRANSFER_SIZE)
        self.old = {t: (total_bytes.labels(*lv, t), total_time.labels(*lv, t), size.labels(*lv, t))
                    for t in (LOAD, STORE)}

    def transfer(self, direction: str, nbytes: float, seconds: float) -> None:
        load = direction == LOAD
        (self.load_bytes if load else self.store_bytes).inc(nbytes)
        (self.load_time if load else self.store_time).inc(seconds)
        observe_many(self.load_size if load else self.store_size, nbytes)
        old_bytes, old_time, old_size = self.old[direction]
        old_bytes.inc(nbytes)
        old_time.inc(seconds)
        observe_many(old_size, nbytes)


class LmcacheTier:
    """LMCache's `lmcache:*` families (the LMCacheConnectorV1 worker of one engine)."""

    LABELS = ["model_name", "worker_id", "role", "served_model_name"]

    def __init__(self, family, model: str, worker: str):
        lv = (model, worker, "worker", model)

        def one(cls, name, doc, **kw):
            return family(cls, f"lmcache:{name}", doc, self.LABELS, **kw).labels(*lv)

        c = Counter
        self.retrieve_requests = one(c, "num_retrieve_requests", "Total number of retrieve requests sent to lmcache")
        self.store_requests = one(c, "num_store_requests", "Total number of store requests sent to lmcache")
        self.lookup_requests = one(c, "num_lookup_requests", "Total number of lookup requests sent to lmcache")
        self.requested_tokens = one(c, "num_requested_tokens", "Total number of tokens requested from lmcache")
        self.hit_tokens = one(c, "num_hit_tokens", "Total number of tokens hit in lmcache")
        self.stored_tokens = one(c, "num_stored_tokens", "Total number of tokens stored in lmcache including "
                                 "evicted ones")
        self.lookup_tokens = one(c, "num_lookup_tokens", "Total number of tokens requested in lookup from lmcache")
        self.lookup_hits = one(c, "num_lookup_hits", "Total number of tokens hit in lookup from lmcache")
        self.vllm_hit_tokens = one(c, "num_vllm_hit_tokens", "Number of hit tokens in vllm")
        self.prompt_tokens = one(c, "num_prompt_tokens", "Number of prompt tokens in lmcache")
        self.evict_count = one(c, "local_cpu_evict_count", "Total number of evict in local cpu backend")
        self.evict_keys = one(c, "local_cpu_evict_keys_count", "Total number of evict keys in local cpu backend")
        self.retrieve_hit_rate = one(Gauge, "retrieve_hit_rate", "Hit rate of lmcache retrieve requests since last log")
        self.lookup_hit_rate = one(Gauge, "lookup_hit_rate", "Hit rate of lmcache lookup requests since last log")
        self.local_cache_usage = one(Gauge, "local_cache_usage", "Local cache usage (bytes) of lmcache")
        self.time_to_retrieve = one(Histogram, "time_to_retrieve", "Time to retrieve from lmcache (seconds)",
                                    buckets=LMCACHE_TIME)
        self.time_to_store = one(Histogram, "time_to_store", "Time to store to lmcache (seconds)",
                                 buckets=LMCACHE_TIME)

    def lookup(self, prompt_tokens: int, device_hit: int, host_hit: int) -> None:
        """One request's lookup: LMCache holds the device-resident prefix too (write-through), so its lookup
        hits are both tiers' tokens; it retrieves only what vLLM does not already hold."""
        self.lookup_requests.inc()
        self.lookup_tokens.inc(prompt_tokens)
        self.lookup_hits.inc(device_hit + host_hit)
        self.lookup_hit_rate.set((device_hit + host_hit) / prompt_tokens if prompt_tokens else 0.0)
        self.vllm_hit_tokens.inc(device_hit)
        self.prompt_tokens.inc(prompt_tokens)
        if host_hit:
            self.retrieve_requests.inc()
            self.requested_tokens.inc(host_hit)
            self.hit_tokens.inc(host_hit)
            self.retrieve_hit_rate.set(1.0)

    def store(self, tokens: int, seconds: float, evicted: int) -> None:
        self.store_requests.inc()
        self.stored_tokens.inc(tokens)
        observe_many(self.time_to_store, seconds)
        if evicted:
            self.evict_count.inc()
            self.evict_keys.inc(evicted)


class SglangHiCache:
    """SGLang's HiCache families for the scheduler (labels as the scheduler's)."""

    def __init__(self, sched, s: tuple[str, ...]):
        self.host_used = sched(Gauge, "hicache_host_used_tokens", "Number of tokens currently used in the host "
                               "KV cache.").labels(*s)
        self.host_total = sched(Gauge, "hicache_host_total_tokens", "Total capacity of the host KV cache in "
                                "tokens.").labels(*s)
        self.evicted = sched(Counter, "evicted_tokens_total",
                             "The number of tokens evicted from GPU to CPU.").labels(*s)
        self.loaded = sched(Counter, "load_back_tokens_total",
                            "The number of tokens loaded from CPU to GPU.").labels(*s)
        self.evict_s = sched(Histogram, "eviction_duration_seconds", "Time taken to evict memory from GPU to CPU in "
                             "seconds.", buckets=SGLANG_TIER_DURATION).labels(*s)
        self.load_s = sched(Histogram, "load_back_duration_seconds", "Time taken to load memory from CPU to GPU in "
                            "seconds.", buckets=SGLANG_TIER_DURATION).labels(*s)
