"""Tuning advice from live telemetry, each suggestion confirmed by a lab replay before anyone sees it.

Rules read the service's stored series over the last hour (`telemetry.SeriesPoint`, the whole service) and
propose one alternative each:

- `fp8_kv`: KV-cache usage above 90 % with preemptions, on a KV cache that is not fp8 already: fp8 KV (twice
  the blocks). Judged on preemptions;
- `smaller_batch`: ITL p95 over its SLO: half the `max_num_seqs` (smaller batches decode faster). Judged on ITL p95;
- `fewer_replicas`: a fixed fleet of more than one replica whose TTFT p95 stays under half its SLO: one replica
  fewer. Judged on GPU-hours, and only if SLO attainment does not drop by more than a point;
- `cheaper_gpu`: TTFT p95 under half its SLO and ITL p95 under half its own: the cheapest GPU type of the
  operators' price table that costs less per GPU-hour and on which the engine starts (the model fits). Judged
  on the cost of the load, and only if SLO attainment does not drop by more than a point;
- `autoscaling_targets`: an autoscaled service (built-in, HPA or KEDA) whose per-replica targets (requests,
  tokens/s) the hour shows as too tight (TTFT p95 under half its SLO with more replicas than the minimum:
  targets doubled, judged on GPU-hours with SLO attainment kept) or too loose (TTFT p95 over its SLO: targets
  halved, judged on SLO attainment);
- `batched_tokens`: prompt tokens/s at least 4 times the generated ones with ITL p95 under half its SLO: twice the
  step budget the engine runs with (`max_num_batched_tokens`, its flag or its default for the GPU), judged on
  TTFT p95; ITL p95 over its SLO: half of it (not below `max_num_seqs`), judged on ITL p95;
- `cpu_kv_tier`: a mean prefix-cache hit rate of at least 30 % with the GPU pool over 90 % full (it evicts cached
  blocks), no tier yet: a CPU tier of 4 GPU KV pools per GPU (or the most a node holds). Judged on TTFT p50;
- `speculative`: on vLLM, a replica that never runs 4 requests at once: n-gram speculative decoding (3 tokens);
  one that runs more than 4 on average with speculative decoding on: off. Judged on ITL p95.

Each proposal is replayed on the service's recorded load against the current configuration; advice whose
predicted effect on its figure is under 5 % (or that makes the figure worse) is not kept.
"""

from __future__ import annotations

import copy
import math
from datetime import timedelta

from django.db import transaction
from django.db.models import Avg, Max, Sum
from django.utils import timezone

from apps.catalog import kvoffload
from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction
from apps.serving.choices import Autoscaler
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SERVICE_ROLE, SeriesPoint
from apps.whatif.apply import gpu_prices, with_costs
from apps.whatif.lab import LoadError, build_scenarios, recorded_load, run_whatif
from apps.whatif.models import Advice, AdviceRule
from apps.whatif.scenarios import MODELLED_MODES, ScenarioError, engine_core, service_slo
from capacity.gpus import node_allocatable_memory_gib

WINDOW = timedelta(hours=1)
MIN_EFFECT_PCT = 5.0
ADVICE_CPU_BUDGET_S = 120.0
FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
SCALED = (Autoscaler.BUILTIN, Autoscaler.HPA, Autoscaler.KEDA)
CAPACITY_TARGETS = ("waiting_requests_per_replica", "running_requests_per_replica",
                    "prompt_tokens_per_s_per_replica", "generation_tokens_per_s_per_replica")
HIGHER_IS_BETTER = ("slo_attainment",)
PREFILL_DOMINANT = 4.0  # prompt tokens per generated token from which prefill dominates the steps
REUSE_HIGH = 0.3  # a mean prefix-cache hit rate from which the prompts' reuse is worth a second tier
KV_FULL = 0.9  # peak KV-cache usage from which the GPU pool evicts cached blocks to make room
TIER_MULTIPLE = 4  # the CPU tier advised, in GPU KV pools (the largest size the reuse curve shows)
SPEC_CONCURRENCY = 4.0  # running requests a replica under which speculative decoding pays, above which it costs
SPEC_TOKENS = 3  # n-gram drafts a step advised
SPEC_OFF = {"speculative_method": None, "speculative_model": None, "num_speculative_tokens": None}


def observations(service, now=None) -> dict | None:
    """The rule inputs over the last hour: peak KV usage, preemptions, mean TTFT and ITL p95, mean replicas, mean
    prompt and generated tokens/s and mean prefix-cache hit rate."""
    now = now or timezone.now()
    rows = SeriesPoint.objects.filter(service_id=service.pk, role=SERVICE_ROLE, resolution=Resolution.RAW,
                                      time__gt=now - WINDOW, time__lte=now)
    found = rows.aggregate(kv_max=Max("kv_usage"), preemptions=Sum("preemptions"), ttft_p95=Avg("ttft_p95"),
                           itl_p95=Avg("itl_p95"), replicas=Avg("ready_replicas"), prompt_tps=Avg("prompt_tps"),
                           gen_tps=Avg("gen_tps"), prefix_hit_rate=Avg("prefix_hit_rate"))
    if found["replicas"] is None:
        return None
    # Concurrency a replica: each interval's running requests (the pods' sum) over its ready replicas.
    per_replica = [r / n for r, n in rows.filter(ready_replicas__gt=0, running__isnull=False)
                   .values_list("running", "ready_replicas")]
    found["running_per_replica"] = sum(per_replica) / len(per_replica) if per_replica else None
    found["running_per_replica_max"] = max(per_replica, default=None)
    return {k: None if v is None else round(float(v), 4) for k, v in found.items()}


def proposals(service, seen: dict) -> list[tuple[str, dict, str]]:
    """(rule, alternative, the figure it is judged on) for each rule the observations fire."""
    settings = service.engine_settings or {}
    slo = service_slo(service.autoscaling)
    engine = next((p for p in service.pools.all() if p.role == "engine"), None)
    out = []
    if (seen["kv_max"] or 0) > 0.9 and (seen["preemptions"] or 0) > 0 and settings.get("kv_cache_dtype") not in FP8:
        out.append((AdviceRule.FP8_KV, {"name": "fp8 KV cache", "engine_settings": {"kv_cache_dtype": "fp8"}},
                    "preemptions"))
    if seen["itl_p95"] is not None and seen["itl_p95"] > slo.itl_s:
        seqs = max(1, (settings.get("max_num_seqs") or 256) // 2)
        out.append((AdviceRule.SMALLER_BATCH, {"name": f"max_num_seqs {seqs}",
                                               "engine_settings": {"max_num_seqs": seqs}}, "itl_p95_s"))
    if (engine is not None and seen["ttft_p95"] is not None and seen["ttft_p95"] < slo.ttft_s / 2
            and (seen["itl_p95"] is None or seen["itl_p95"] < slo.itl_s / 2)):
        cheaper = _cheaper_gpu(service, engine.gpu_type)
        if cheaper is not None:
            out.append((AdviceRule.CHEAPER_GPU, cheaper, "cost_usd"))
    if (engine is not None and not service.autoscaled_by_builtin and engine.replicas > 1
            and seen["ttft_p95"] is not None and seen["ttft_p95"] < slo.ttft_s / 2):
        n = engine.replicas - 1
        out.append((AdviceRule.FEWER_REPLICAS, {"name": f"{n} replica{'s' if n > 1 else ''}", "replicas": n,
                                                "min_replicas": min(engine.min_replicas, n)}, "gpu_hours"))
    if engine is not None and (service.autoscaling or {}).get("autoscaler") in SCALED and seen["ttft_p95"] is not None:
        if seen["ttft_p95"] < slo.ttft_s / 2 and (seen["replicas"] or 0) > engine.min_replicas:
            scaled = _scaled_targets(service.autoscaling, 2.0)
            if scaled is not None:
                out.append((AdviceRule.AUTOSCALING_TARGETS, {"name": "looser autoscaling targets",
                                                             "autoscaling": scaled}, "gpu_hours"))
        elif seen["ttft_p95"] > slo.ttft_s:
            scaled = _scaled_targets(service.autoscaling, 0.5)
            if scaled is not None:
                out.append((AdviceRule.AUTOSCALING_TARGETS, {"name": "tighter autoscaling targets",
                                                             "autoscaling": scaled}, "slo_attainment"))
    if engine is not None:
        out += _batched_tokens(service, seen, slo)
        out += _cpu_tier(service, seen, engine)
        out += _speculative(service, seen)
    return out


def _speculative(service, seen: dict) -> list[tuple[str, dict, str]]:
    """Speculative decoding (n-gram drafts, vLLM) on when a replica never runs SPEC_CONCURRENCY requests at once
    (decode is memory-bound: verifying the drafts is nearly free), off when it runs more on average (the verify's
    compute costs more than the accepted drafts save). Judged on ITL p95 either way."""
    settings = service.engine_settings or {}
    on = settings.get("speculative_method") is not None or settings.get("speculative_model") is not None
    peak, mean = seen["running_per_replica_max"], seen["running_per_replica"]
    if not on and service.runtime.engine == "vllm" and peak is not None and 0 < peak < SPEC_CONCURRENCY:
        return [(AdviceRule.SPECULATIVE, {"name": f"n-gram speculative decoding ({SPEC_TOKENS} tokens)",
                                          "engine_settings": {"speculative_method": "ngram",
                                                              "num_speculative_tokens": SPEC_TOKENS}}, "itl_p95_s")]
    if on and mean is not None and mean > SPEC_CONCURRENCY:
        return [(AdviceRule.SPECULATIVE, {"name": "speculative decoding off", "engine_settings": dict(SPEC_OFF)},
                 "itl_p95_s")]
    return []


def _batched_tokens(service, seen: dict, slo) -> list[tuple[str, dict, str]]:
    """A larger step budget when prefill dominates and ITL has headroom (prompts take fewer, fuller steps: judged
    on TTFT p95), a smaller one when ITL misses its SLO (a prefill chunk delays every decode of its step: judged
    on ITL p95). The budget starts from the one the engine runs with (its flag, or its default for the GPU)."""
    itl = seen["itl_p95"]
    if itl is None:
        return []
    settings = service.engine_settings or {}
    if itl > slo.itl_s:
        try:
            current = engine_core(service).max_num_batched_tokens
        except ScenarioError:
            return []
        smaller = max(current // 2, settings.get("max_num_seqs") or 1)
        if smaller >= current:
            return []
        return [(AdviceRule.BATCHED_TOKENS, {"name": f"max_num_batched_tokens {smaller}",
                                             "engine_settings": {"max_num_batched_tokens": smaller}}, "itl_p95_s")]
    prompt, gen = seen["prompt_tps"], seen["gen_tps"]
    if itl < slo.itl_s / 2 and prompt and gen and prompt >= PREFILL_DOMINANT * gen:
        try:
            current = engine_core(service).max_num_batched_tokens
        except ScenarioError:
            return []
        larger = current * 2
        return [(AdviceRule.BATCHED_TOKENS, {"name": f"max_num_batched_tokens {larger}",
                                             "engine_settings": {"max_num_batched_tokens": larger}}, "ttft_p95_s")]
    return []


def _cpu_tier(service, seen: dict, engine) -> list[tuple[str, dict, str]]:
    """A CPU tier of the KV cache when the prompts reuse prefixes and the GPU pool is full (so it evicts cached
    blocks): evicted blocks come back over the host link instead of being recomputed. Judged on TTFT p50: the
    tier speeds up the requests that reuse a prefix, while the first request of each prefix computes it either
    way, and those misses are what the p95 shows."""
    settings = service.engine_settings or {}
    if (settings.get("kv_offload") is not None or settings.get("enable_prefix_caching") is False
            or (seen["prefix_hit_rate"] or 0) < REUSE_HIGH or (seen["kv_max"] or 0) <= KV_FULL):
        return []
    size = _tier_size(service, engine)
    if size is None:
        return []
    backend = kvoffload.BACKENDS[service.runtime.engine][0]
    return [(AdviceRule.CPU_KV_TIER, {"name": f"CPU KV tier {size} GiB",
                                      "engine_settings": {"kv_offload": {"backend": backend, "size_gib": size}}},
             "ttft_p50_s")]


def _tier_size(service, engine) -> int | None:
    """TIER_MULTIPLE times the GPU KV pool of a rank, in whole GiB per GPU, or the largest a node of the pool's
    GPU type can hold beside the engine when that is less; None when no tier fits or the engine does not start."""
    try:
        core = engine_core(service)
    except ScenarioError:
        return None
    pool_gib = core.num_blocks * core.block_size * core.kv_bytes_per_token_rank / kvoffload.GIB
    allocatable = node_allocatable_memory_gib(core.gpu, engine.gpus_per_replica)
    size = math.ceil(TIER_MULTIPLE * pool_gib)  # whole GiB
    while size >= 1 and kvoffload.pod_request_gib(size, engine.gpus_per_replica) > allocatable:
        size -= 1
    return size if size >= 1 else None


def _scaled_targets(autoscaling: dict, factor: float) -> dict | None:
    """The policy with its per-replica count and rate targets (service-wide and per pool) times `factor`; None
    when it has none (latency and KV-usage targets are SLOs and ratios, not capacity, and stay)."""
    out = copy.deepcopy(autoscaling)
    changed = False
    pools = (out.get("pools") or {}).values()
    for targets in [out.get("targets") or {}, *((p or {}).get("targets") or {} for p in pools)]:
        for name in list(targets):
            if name in CAPACITY_TARGETS:
                value = targets[name] * factor
                targets[name] = max(1, round(value)) if "requests" in name else round(value, 1)
                changed = True
    return out if changed else None


def _cheaper_gpu(service, gpu_type: str) -> dict | None:
    """The cheapest priced GPU type below the service's own price on which its engine starts, as an alternative."""
    prices = gpu_prices()
    here = prices.get(gpu_type)
    if here is None:
        return None
    for gpu, price in sorted(prices.items(), key=lambda item: (item[1], item[0])):
        if price >= here:
            return None
        alternative = {"name": f"{gpu} GPUs", "gpu_type": gpu}
        try:
            build_scenarios(service, [alternative])  # the service's validation and the engine's start-up
        except ScenarioError:
            continue
        return alternative
    return None


def _effect(figure: str, current: dict, alternative: dict) -> float | None:
    """The improvement on `figure` in percent (positive: better), None when it cannot be judged."""
    before, after = current.get(figure), alternative.get(figure)
    if before is None or after is None or before <= 0:
        return None
    if figure in HIGHER_IS_BETTER:
        return round((after - before) / before * 100, 1)
    if figure in ("gpu_hours", "cost_usd") and (
            (alternative["slo_attainment"] or 0) < (current["slo_attainment"] or 0) - 0.01):
        return None  # cheaper only by missing the SLO more: not advice
    return round((before - after) / before * 100, 1)


def refresh_advice(service, now=None) -> list[Advice]:
    """Evaluate the rules, replay what they propose on the recorded load, keep the confirmed advice (a dismissed
    one stays dismissed), drop what no longer holds; returns the service's advice now shown."""
    seen = observations(service, now)
    proposed = proposals(service, seen) if seen else []
    keep = []
    if proposed:
        try:
            load = recorded_load(service, WINDOW, until=now)
            result = run_whatif(service, load, [alt for _, alt, _ in proposed], cpu_budget_s=ADVICE_CPU_BUDGET_S)
        except (LoadError, ScenarioError):
            result = None
        scenarios = {s["name"]: s for s in with_costs((result or {}).get("scenarios", []), gpu_prices())}
        current = scenarios.get("current")
        for rule, alternative, figure in proposed:
            replay = scenarios.get(alternative["name"])
            effect = None if current is None or replay is None else _effect(figure, current, replay)
            if effect is None or effect < MIN_EFFECT_PCT:
                continue
            keep.append(rule)
            Advice.objects.update_or_create(service=service, rule=rule, defaults={
                "inputs": seen, "alternative": alternative,
                "predicted": {"figure": figure, "current": current[figure], "suggested": replay[figure],
                              "effect_pct": effect, "requests": result["requests"]}})
    Advice.objects.filter(service=service).exclude(rule__in=keep).delete()
    return list(Advice.objects.filter(service=service, dismissed_at__isnull=True))


def dismiss(advice: Advice, *, actor, via) -> Advice:
    """Hide the advice (audited); it stays hidden while its rule keeps firing."""
    before = snapshot(advice)
    advice.dismissed_at = timezone.now()
    with transaction.atomic():
        advice.save(update_fields=["dismissed_at", "updated"])
        record_change(actor=actor, obj=advice, action=AuditAction.UPDATE, via=via, before=before)
    return advice


def advised_services():
    """Services with recorded load in the last hour (gateway rows or the engines' request mixes), of the modes
    the lab models."""
    from apps.gateway.models import UsageRow
    from apps.serving.models import InferenceService
    from apps.telemetry.models import RequestMixPoint

    since = timezone.now() - WINDOW
    ids = set(RequestMixPoint.objects.filter(time__gt=since).values_list("service_id", flat=True).distinct())
    ids |= set(UsageRow.objects.filter(at__gt=since, service_id__isnull=False)
               .values_list("service_id", flat=True).distinct())
    return InferenceService.objects.with_related().filter(pk__in=ids, deployment_mode__in=MODELLED_MODES)
