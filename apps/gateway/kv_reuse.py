"""What would more CPU memory buy this service? Its reuse curve, from the prefix blocks of its own requests.

The gateway keeps each forwarded request's prompt as chained hashes of 64-character chunks (gateway/prefix.py)
on its usage row. Replaying the service's latest requests (at most SAMPLE_REQUESTS of the last SAMPLE_WINDOW)
through `capacity.reuse.ReuseSample` gives the hit rate an LRU prefix cache of any size would have had. Sizes
are converted between the engine's tokens and the gateway's characters with the service's own ratio (the
prompt tokens the engines reported over the characters sent).

With a write-through CPU tier of T tokens beside a GPU cache of G, both tiers together hit as an LRU of
max(G, T) (the GPU's blocks are in the tier too); the GPU alone as one of G; the difference is what the tier
loads back. A prefix-aware router sends a prefix to one replica, so the replicas' caches add up; other routers
send every prefix everywhere, so one replica's cache is the size that counts.

TTFT at another size is each sampled request's measured TTFT with its prefill re-timed: less the roofline's
prefill of the tokens it computed at the current size plus that of the tokens it would compute at the other,
and the host-link time of the blocks the tier would load (capacity.roofline, the GPU table's host link at
HOST_LINK_FRACTION). Queueing is left as measured, so where shorter prefills also shorten queues the gain is
understated. The same replay places each request's prefix in a tier (where its deepest hit came from), which
splits the measured TTFT by tier: the engines export no per-request tier.
"""

from __future__ import annotations

import math
from datetime import timedelta

from django.core.cache import cache
from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.serving.capacity import arch_of, service_pool_plan
from apps.serving.choices import PoolRole, RoutingPolicy
from capacity import arch as a
from capacity.gpus import HOST_LINK_FRACTION
from capacity.reuse import KNEE_GAIN, ReuseSample
from capacity.roofline import Roofline
from gateway.prefix import CHUNK_CHARS

SAMPLE_REQUESTS = 600  # a replay of 600 prompts of 3,000 tokens takes about a second
SAMPLE_WINDOW = timedelta(hours=1)
MIN_REQUESTS = 20  # fewer say too little about reuse to show a curve
MULTIPLES = (0.5, 2.0, 4.0)
GIB = 2**30
PREFILL_CHUNK = 2048  # tokens a prefill step takes (vLLM's default batch on a < 70 GiB GPU)
TIERS = ("gpu", "cpu", "miss")
CACHE_SECONDS = 30
MISSING = object()


def _p(values: list[float], q: float) -> float | None:
    """The q-quantile by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _engine_pool(service):
    """The pool whose prefix cache the prompts look up: the engine pool, a P/D service's prefill pool, or the
    only one (a multi-node leader group)."""
    pools = {p.role: p for p in service.spec_pools()}
    return pools.get(PoolRole.ENGINE) or pools.get(PoolRole.PREFILL) or next(iter(pools.values()), None)


def cached_service_reuse(service) -> dict | None:
    """`service_reuse`, kept CACHE_SECONDS per service and spec version: the panel and the API read it often."""
    key = f"kv-reuse:{service.pk}:{service.generation}"
    found = cache.get(key, MISSING)
    if found is MISSING:
        found = service_reuse(service)
        cache.set(key, found, CACHE_SECONDS)
    return found


def service_reuse(service, now=None) -> dict | None:
    """The estimate for `service`, or None with too few sampled requests or no plan (see the module docstring).
    Keys: requests, sizes (current and MULTIPLES), knee, sentence, ttft_by_tier; sizes in GiB per GPU of tier."""
    now = now or timezone.now()
    pool = _engine_pool(service)
    found = service_pool_plan(service, pool)
    if found is None:
        return None
    plan, knobs, gpu = found
    rows = list(UsageRow.objects.filter(
        service_id=service.pk, status=200, prefix_blocks__isnull=False, prompt_chars__gt=0, prompt_tokens__gt=0,
        at__gte=now - SAMPLE_WINDOW,
    ).order_by("-at").values_list("prompt_chars", "prompt_tokens", "prefix_blocks", "ttft_ms", "at")[:SAMPLE_REQUESTS])
    if len(rows) < MIN_REQUESTS:
        return None
    rows.reverse()  # replayed oldest first
    sample = ReuseSample(block_size=CHUNK_CHARS, max_requests=len(rows))
    for chars, _, hashes, _, _ in rows:
        sample.observe(hashes, chars)
    chars_per_token = sum(r[0] for r in rows) / sum(r[1] for r in rows)
    replicas = max(1, pool.ready_replicas or pool.replicas) if service.routing_policy in (
        RoutingPolicy.PREFIX_AWARE, RoutingPolicy.KV_AWARE) else 1
    gpu_tokens = plan.max_tokens * replicas
    tier_tokens = plan.cpu_tier_tokens * replicas
    wbytes = a.weight_bytes_per_param(knobs.quantization, arch_of(service.model).dtype_bytes)
    roof = Roofline(arch_of(service.model), gpu, plan.tp, arch_of(service.model).weights_bytes(wbytes, plan.tp),
                    plan.kv_bytes_per_token)
    model = _Model(sample, rows, chars_per_token, gpu_tokens, tier_tokens, roof,
                   block_load_s=plan.block_bytes / (gpu.host_link * HOST_LINK_FRACTION))

    def tokens_of_gib(gib: float) -> int:
        return int(gib * GIB // plan.kv_bytes_per_token) * replicas

    def gib_of_tokens(tokens: float) -> float:
        return tokens / replicas * plan.kv_bytes_per_token / GIB

    current_gib = knobs.cpu_tier_gib or 0.0
    base_gib = current_gib or gib_of_tokens(gpu_tokens)  # without a tier: multiples of the GPU cache's size
    sizes = [model.size("current", current_gib, tier_tokens)]
    sizes += [model.size(f"{m:g}x", round(m * base_gib, 2), tokens_of_gib(m * base_gib)) for m in MULTIPLES]
    knee_tokens = sample.knee() * CHUNK_CHARS / chars_per_token
    knee_gib = round(gib_of_tokens(knee_tokens), 2) if knee_tokens > gpu_tokens else 0.0
    return {
        "requests": len(rows), "window_s": int(SAMPLE_WINDOW.total_seconds()),
        "chars_per_token": round(chars_per_token, 3),
        "gpu_cache_tokens": gpu_tokens, "replicas_counted": replicas, "cpu_tier_gib": current_gib,
        "sizes": sizes, "knee_gib": knee_gib,
        "sentence": _sentence(sizes[0], model.size("knee", knee_gib, math.ceil(knee_tokens)), current_gib),
        "ttft_by_tier": model.ttft_by_tier(),
        # Tokens a second the replay's LRUs push out: the GPU cache's go to the tier, the tier's are lost.
        "evicted_tokens_per_s": {
            "gpu": model.evicted_per_s(gpu_tokens),
            "cpu_tier": model.evicted_per_s(max(gpu_tokens, tier_tokens)) if tier_tokens else None},
    }


class _Model:
    """The replayed sample read at cache sizes in tokens: hit rates and re-timed TTFTs."""

    def __init__(self, sample: ReuseSample, rows: list, chars_per_token: float, gpu_tokens: int, tier_tokens: int,
                 roof: Roofline, block_load_s: float):
        self.sample, self.rows, self.roof, self.block_load_s = sample, rows, roof, block_load_s
        self.cpt, self.gpu_tokens, self.tier_tokens = chars_per_token, gpu_tokens, tier_tokens
        # Each request's prefill and loads at the current sizes: what its measured TTFT already contains.
        self._current = [self.cost(i, tier_tokens) for i in range(len(rows))]

    def _chunks(self, tokens: float) -> float:
        return tokens * self.cpt / CHUNK_CHARS

    def hit_tokens(self, i: int, cache_tokens: float) -> float:
        """Tokens of sampled request i that a cache of `cache_tokens` hits (its own characters-per-token)."""
        chars, tokens = self.rows[i][0], self.rows[i][1]
        return min(tokens, self.sample.hits(i, self._chunks(cache_tokens)) * tokens / chars)

    def cost(self, i: int, tier_tokens: int) -> float:
        """Seconds request i spends prefilling what it misses and loading what the tier gives back."""
        tokens = self.rows[i][1]
        gpu_hit = self.hit_tokens(i, self.gpu_tokens)
        hit = max(gpu_hit, self.hit_tokens(i, max(self.gpu_tokens, tier_tokens)))
        t, start = (hit - gpu_hit) / 16 * self.block_load_s, int(hit)
        while start < tokens:
            n = min(PREFILL_CHUNK, tokens - start)
            t += self.roof.step_time([(start, n)], [])
            start += n
        return t

    def size(self, label: str, tier_gib: float, tier_tokens: int) -> dict:
        both = self.sample.hit_rate(self._chunks(max(self.gpu_tokens, tier_tokens)))
        gpu = self.sample.hit_rate(self._chunks(self.gpu_tokens))
        ttfts = [max(0.0, ms / 1000 - self._current[i] + self.cost(i, tier_tokens))
                 for i, (_, _, _, ms, _) in enumerate(self.rows) if ms is not None]
        p95 = _p(ttfts, 0.95)
        return {"label": label, "cpu_tier_gib": tier_gib, "hit_rate": round(both, 4), "gpu_hit_rate": round(gpu, 4),
                "cpu_hit_rate": round(both - gpu, 4), "ttft_p95_s": None if p95 is None else round(p95, 3)}

    def evicted_per_s(self, cache_tokens: float) -> float | None:
        """Tokens a second an LRU of `cache_tokens` evicted in the replay: every block it missed was inserted,
        and once the blocks inserted pass its size each pushes one out (the replay starts empty)."""
        span = (self.rows[-1][4] - self.rows[0][4]).total_seconds()
        if span <= 0:
            return None
        size = self._chunks(cache_tokens)
        inserted = sum(len(r[2]) - self.sample.hits(i, size) // CHUNK_CHARS for i, r in enumerate(self.rows))
        return round(max(0.0, inserted - size) * CHUNK_CHARS / self.cpt / span, 1)

    def ttft_by_tier(self) -> dict:
        split: dict[str, list[float]] = {t: [] for t in TIERS}
        for i, (_, _, _, ms, _) in enumerate(self.rows):
            if ms is None:
                continue
            gpu = self.hit_tokens(i, self.gpu_tokens)
            both = self.hit_tokens(i, max(self.gpu_tokens, self.tier_tokens))
            split["cpu" if both > gpu else "gpu" if gpu > 0 else "miss"].append(ms / 1000)
        return {t: {"requests": len(v), "ttft_p50_s": _round(_p(v, 0.5)), "ttft_p95_s": _round(_p(v, 0.95))}
                for t, v in split.items()}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _sentence(current: dict, knee: dict, current_gib: float) -> str:
    """"N GiB more CPU tier would raise the hit rate from x to y and TTFT p95 from a to b", or why not."""
    if knee["cpu_tier_gib"] <= current_gib or knee["hit_rate"] - current["hit_rate"] < KNEE_GAIN:
        where = f"the {current_gib:g} GiB tier" if current_gib else "the GPU cache"
        said = f"More CPU memory would buy under 1 % more prefix hits: {where} already holds what this traffic reuses"
        if current_gib and not knee["cpu_tier_gib"]:
            return f"{said}, and the GPU cache alone holds it: the tier buys under 1 % of hits."
        if current_gib and knee["cpu_tier_gib"] < current_gib:
            return f"{said}; {knee['cpu_tier_gib']:.1f} GiB per GPU would hit within 1 % as often."
        return f"{said}."
    more = knee["cpu_tier_gib"] - current_gib
    ttft = ""
    if current["ttft_p95_s"] is not None and knee["ttft_p95_s"] is not None:
        ttft = f" and TTFT p95 from {current['ttft_p95_s']:.2f} s to {knee['ttft_p95_s']:.2f} s"
    return (f"{more:.1f} GiB more CPU tier per GPU ({knee['cpu_tier_gib']:g} GiB in all, beyond which more buys under "
            f"1 % more hits) would raise the hit rate from {current['hit_rate']:.0%} to {knee['hit_rate']:.0%}{ttft}.")
