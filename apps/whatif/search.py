"""The inverse question: the cheapest configurations of a service that meet its SLO on a load (a Pareto front).

The space spans GPU type and GPUs per replica (tensor parallel over them), the built-in autoscaler's replica
bounds and targets, and the engine settings that matter (`max_num_batched_tokens`, `max_num_seqs`, KV dtype, the
CPU tier of the KV cache, speculative decoding) and the routing policy. The capacity planner prunes before
anything replays (`capacity.plan`, `capacity.advisor`): a configuration whose replica cannot hold the model at the
service's context, or whose largest fleet cannot serve the load's busiest minute within the TTFT allowance, is
dropped with the planner's reason; the planner also sizes each survivor's replica bounds (the quietest and the
busiest minute's replicas). Survivors replay on the fleet simulation (`apps.whatif.lab`) in three stages, within
a CPU budget: the hardware options cheapest by the planner's estimate; then more headroom for the one that
missed the SLO more cheaply than the best meeting it (or for the best, when none meets it); then, on the best, one
engine setting or the routing policy changed at a time. Each replay is judged by
the service's own validation first (`apps.whatif.scenarios.scenario`), as the lab judges any alternative.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from apps.catalog import kvoffload
from apps.catalog.engines import EngineSettings, EngineSettingsError
from apps.serving.capacity import arch_of, draft_of, pool_plan
from apps.serving.choices import RoutingPolicy
from apps.whatif.apply import gpu_prices
from apps.whatif.fleet import BUILTIN_TARGETS, ITL_AIM, TTFT_AIM, OverBudget
from apps.whatif.lab import Load, _replay, check_size
from apps.whatif.scenarios import ScenarioError, merged_settings, scenario, service_slo
from capacity import advisor
from capacity.gpus import GPUS, gpu_for

SEARCH_CPU_BUDGET_S = 50.0  # replays stop here, so that a search of an hour of load ends within a minute
HARDWARE_REPLAYS = 3  # hardware options replayed in the first stage (the planner's cheapest)
MAX_REPLICAS = 32  # the largest pool the search proposes
MINUTE_S = 60.0
HEADROOM = 1.5  # the third stage's maximum over the planner's
CPU_TIER_GIB = 8  # a modest tier per GPU that a node of any GPU kind holds beside the engine
SPEC_NGRAM = {"speculative_method": "ngram", "num_speculative_tokens": 3}
SPEC_OFF = {"speculative_method": None, "speculative_model": None, "num_speculative_tokens": None}


@dataclass(frozen=True)
class Space:
    """What the search varies; each engine setting's tuple lists the values tried besides the service's own."""

    gpu_types: tuple[str, ...]
    tps: tuple[int, ...] = (1, 2, 4, 8)
    kv_cache_dtypes: tuple[str, ...] = ("fp8",)
    max_num_seqs: tuple[int, ...] = (128,)
    max_num_batched_tokens: tuple[int, ...] = (8192,)
    cpu_tier: bool = True
    speculative: bool = True
    routing: tuple[str, ...] = (RoutingPolicy.PREFIX_AWARE,)
    headroom: bool = True


@dataclass
class Shape:
    """What the planner reads of a load: mean lengths, the busiest and the quietest minute's rate."""

    prompt: int
    output: int
    peak_rate: float
    low_rate: float
    hours: float

    @classmethod
    def of(cls, load: Load) -> Shape:
        reqs = load.requests
        minutes = [0] * (int(load.duration_s // MINUTE_S) + 1)
        for r in reqs:
            minutes[int(r.t // MINUTE_S)] += 1
        full = minutes[:-1] or minutes  # the last minute is partial
        return cls(prompt=max(1, round(sum(r.prompt_tokens for r in reqs) / len(reqs))),
                   output=max(1, round(sum(r.output_tokens for r in reqs) / len(reqs))),
                   peak_rate=max(full) / MINUTE_S, low_rate=sorted(full)[len(full) // 10] / MINUTE_S,
                   hours=max(load.duration_s, 1.0) / 3600)


@dataclass
class Outcome:
    """What the search found: the replayed rows, the pruned configurations with the planner's reasons, the rest."""

    rows: list[dict] = field(default_factory=list)
    pruned: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    stopped: str | None = None


def default_space(service) -> Space:
    """The GPU types the service's cluster has nodes of (by product label) and its own type."""
    pool = _engine_pool(service)
    by_product = {g.product: g.key for g in GPUS.values()}
    seen = {by_product.get(p) for p in service.cluster.gpu_nodes.values_list("gpu_product", flat=True)} - {None}
    return Space(gpu_types=tuple(sorted(seen | {pool.gpu_type})))


def _engine_pool(service):
    return next(p for p in service.pools.all() if p.role == "engine")


def replicas_needed(service, settings: EngineSettings, gpu_type: str, tp: int, shape: Shape, rate: float,
                    allowance_s: float) -> tuple[int | None, str]:
    """The fewest replicas (up to MAX_REPLICAS) whose planned TTFT p95 at `rate` is within the TTFT budget, or
    None with the planner's reason: the replica does not fit, or even MAX_REPLICAS saturate."""
    pool = SimpleNamespace(gpu_type=gpu_type, gpus_per_replica=tp, nodes_per_replica=1)
    found = pool_plan(service.model, service.runtime.engine, settings, pool, draft_of(service.tenant_id, settings))
    if found is None:
        return None, f"tensor_parallel_size {tp} is not a parallelism of {tp} GPUs for this engine"
    plan, knobs, gpu = found
    if not plan.fits:
        return None, plan.reason
    load, arch = advisor.Load(rate, shape.prompt, shape.output, allowance_s), arch_of(service.model)
    # The lab's TTFT budget is the allowance over the request's own prefill on an idle replica (`fleet.Slo`).
    idle = advisor.replica_figures(arch, gpu, plan.tp, load, 1e-9, knobs)
    budget = allowance_s + (idle[0] if idle else 0.0)
    for n in range(1, MAX_REPLICAS + 1):
        figures = advisor.replica_figures(arch, gpu, plan.tp, load, rate / n, knobs)
        if figures is not None and figures[0] <= budget:
            return n, ""
    return None, (f"{MAX_REPLICAS} replicas of {tp} × {gpu.short} cannot serve the busiest minute's "
                  f"{rate:.2f} requests/s of {shape.prompt}+{shape.output} tokens within a TTFT budget of "
                  f"{allowance_s:g} s over the prompt's own prefill")


def _settings(service, changes: dict) -> EngineSettings | None:
    try:
        return EngineSettings.from_dict(merged_settings(service.engine_settings, changes))
    except EngineSettingsError:
        return None


def sized(service, shape: Shape, gpu_type: str, tp: int, engine: dict, slo, headroom: float = 1.0
          ) -> tuple[dict | None, str, float]:
    """The alternative of `tp` × `gpu_type` with `engine` settings, its replica bounds sized by the planner
    (the quietest and the busiest minute), and the planner's GPU-hours (the mean of the bounds over the load);
    None with the reason when the planner prunes it."""
    engine = {**engine, "tensor_parallel_size": tp}
    settings = _settings(service, engine)
    if settings is None:
        return None, "engine settings the engine does not read", math.inf
    high, why = replicas_needed(service, settings, gpu_type, tp, shape, shape.peak_rate, slo.ttft_s)
    if high is None:
        return None, why, math.inf
    low, _ = replicas_needed(service, settings, gpu_type, tp, shape, max(shape.low_rate, 1e-3), slo.ttft_s)
    high = min(MAX_REPLICAS, math.ceil(high * headroom))
    low = max(1, min(low or 1, high))
    targets = {**BUILTIN_TARGETS, "ttft_p95_seconds": slo.ttft_s}
    alt = {"gpu_type": gpu_type, "gpus_per_replica": tp, "min_replicas": low, "max_replicas": high,
           "replicas": low, "engine_settings": engine, "autoscaling": {"autoscaler": "builtin", "targets": targets}}
    return alt, "", (low + high) / 2 * tp * shape.hours


def describe(alt: dict) -> str:
    """'2 × L4 (TP 2), 1–6 replicas, fp8 KV' (at most 60 characters: an alternative's name)."""
    gpu = gpu_for(alt["gpu_type"])
    words = [f"{alt['gpus_per_replica']} × {gpu.short} (TP {alt['engine_settings']['tensor_parallel_size']})",
             f"{alt['min_replicas']}–{alt['max_replicas']} replicas"]
    extra = alt.get("_knob")
    if extra:
        words.append(extra)
    return ", ".join(words)[:60]


def _knob_variants(service, space: Space) -> list[tuple[str, dict, str | None]]:
    """(words, engine settings, routing policy) of each single change the second stage tries."""
    current = service.engine_settings or {}
    out: list[tuple[str, dict, str | None]] = []
    out += [(f"{v} KV", {"kv_cache_dtype": v}, None) for v in space.kv_cache_dtypes
            if current.get("kv_cache_dtype") != v]
    out += [(f"max_num_seqs {v}", {"max_num_seqs": v}, None) for v in space.max_num_seqs
            if current.get("max_num_seqs") != v]
    out += [(f"batched tokens {v}", {"max_num_batched_tokens": v}, None) for v in space.max_num_batched_tokens
            if current.get("max_num_batched_tokens") != v]
    if space.cpu_tier and current.get("kv_offload") is None and current.get("enable_prefix_caching") is not False:
        backend = kvoffload.BACKENDS[service.runtime.engine][0]
        out.append((f"CPU KV tier {CPU_TIER_GIB} GiB", {"kv_offload": {"backend": backend, "size_gib": CPU_TIER_GIB}},
                    None))
    if space.speculative:
        on = current.get("speculative_method") or current.get("speculative_model")
        out.append(("speculative off", dict(SPEC_OFF), None) if on else ("n-gram speculation", dict(SPEC_NGRAM), None))
    out += [(f"routing {r}", {}, r) for r in space.routing if r != service.routing_policy]
    return out


def meets(row: dict) -> bool:
    return row["slo_attainment"] >= TTFT_AIM and row["itl_slo_attainment"] >= ITL_AIM


def pareto(rows: list[dict], cost_key: str) -> list[dict]:
    """The rows no other row beats on cost, TTFT-budget and ITL attainment at once (one of equal rows), by cost."""
    def key(r):
        return (r[cost_key], -r["slo_attainment"], -r["itl_slo_attainment"])

    front: list[dict] = []
    for r in sorted(rows, key=key):
        if not any(f[cost_key] <= r[cost_key] and f["slo_attainment"] >= r["slo_attainment"]
                   and f["itl_slo_attainment"] >= r["itl_slo_attainment"] for f in front):
            front.append(r)
    return front


class Searcher:
    """One search of one service over one load: replays under a shared CPU budget, in the stages above."""

    def __init__(self, service, load: Load, space: Space, cpu_budget_s: float, progress=None):
        self.service, self.load, self.space, self.progress = service, load, space, progress
        self.slo = service_slo(service.autoscaling)
        self.shape = Shape.of(load)
        self.budget_s, self.cpu0 = cpu_budget_s, time.thread_time()
        self.prices = gpu_prices()
        self.out = Outcome()
        self.names: set[str] = set()

    def replay(self, alt: dict | None) -> dict | None:
        """Replay one alternative (None: the current configuration); None when validation refuses it."""
        name = "current" if alt is None else describe(alt)
        if name in self.names:
            return next(r for r in self.out.rows if r["name"] == name)
        changes = {} if alt is None else {k: v for k, v in alt.items() if not k.startswith("_")}
        beaten = alt is not None and self._dominated(alt)
        if beaten:
            self.out.pruned.append({"config": changes, "reason": beaten})
            return None
        try:
            sc = scenario(self.service, {**changes, "name": name}, name, slo=self.slo)
        except ScenarioError as exc:
            self.out.refused.append({"config": changes, "reason": "; ".join(exc.problems)})
            return None
        result = _replay(sc, self.load, self._tick)
        self.names.add(name)
        row = {"name": name, "config": sc.changes, "changes": sc.changes,
               **{k: v for k, v in result.items() if k not in ("name", "changes", "timeline")},
               "timeline": result["timeline"], "usd_per_gpu_hour": self.prices.get(result["gpu_type"]),
               "knob": (alt or {}).get("_knob")}
        row["cost_usd"] = None if row["usd_per_gpu_hour"] is None else round(
            row["gpu_hours"] * row["usd_per_gpu_hour"], 4)
        self.out.rows.append(row)
        return row

    def _dominated(self, alt: dict) -> str:
        """Why `alt` cannot enter the front, unreplayed: its pool never holds fewer than its minimum, so it costs at
        least that over the load, and a replayed row meeting every request costs no more ('' when none does)."""
        cost = "cost_usd" if self._priced() else "gpu_hours"
        floor = alt["min_replicas"] * alt["gpus_per_replica"] * self.shape.hours * (
            self.prices.get(alt["gpu_type"], 1.0) if self._priced() else 1.0)
        for r in self.out.rows:
            if r["name"] != "current" and r["slo_attainment"] == r["itl_slo_attainment"] == 1.0 and r[cost] <= floor:
                return (f"dominated: costs at least {floor:.2f} ({cost}), and {r['name']} meets every request "
                        f"at {r[cost]}")
        return ""

    def _tick(self, t: float, end: float) -> None:
        used = time.thread_time() - self.cpu0
        if used > self.budget_s:
            raise OverBudget(f"replays stopped over the search's CPU budget of {self.budget_s:g} s")
        if self.progress is not None:
            self.progress(min(used / self.budget_s, 0.99))

    def hardware(self) -> list[tuple[float, dict]]:
        """Every GPU type × TP the planner keeps, cheapest estimate first (USD where every type has a price)."""
        kept = []
        for gpu_type in self.space.gpu_types:
            gpu = gpu_for(gpu_type)
            for tp in self.space.tps:
                if tp > gpu.max_gpus_per_node:
                    continue
                alt, why, gpu_h = sized(self.service, self.shape, gpu_type, tp, {}, self.slo)
                if alt is None:
                    self.out.pruned.append({"config": {"gpu_type": gpu_type, "gpus_per_replica": tp}, "reason": why})
                    continue
                kept.append((gpu_h * self.prices.get(gpu_type, 1.0) if self._priced() else gpu_h, alt))
        return sorted(kept, key=lambda c: (c[0], c[1]["gpus_per_replica"]))

    def _priced(self) -> bool:
        return all(g in self.prices for g in self.space.gpu_types)

    def best(self) -> dict | None:
        cost = "cost_usd" if self._priced() else "gpu_hours"
        mine = [r for r in self.out.rows if r["name"] != "current"]
        meeting = [r for r in mine if meets(r)]
        if meeting:
            return min(meeting, key=lambda r: (r[cost], -r["slo_attainment"]))
        return max(mine, key=lambda r: (r["slo_attainment"] + r["itl_slo_attainment"], -r[cost]), default=None)

    def run(self) -> Outcome:
        try:
            self.replay(None)
            for _, alt in self.hardware()[:HARDWARE_REPLAYS]:
                self.replay(alt)
            self._headroom()
            self._knobs()
        except OverBudget as exc:
            self.out.stopped = str(exc)
        return self.out

    def _knobs(self) -> None:
        base = self.best()
        if base is None:
            return
        cfg = base["config"]
        for words, engine, routing in _knob_variants(self.service, self.space):
            alt, why, _ = sized(self.service, self.shape, cfg["gpu_type"], cfg["gpus_per_replica"], engine, self.slo)
            if alt is None:
                self.out.pruned.append({"config": {**cfg, "engine_settings": engine}, "reason": why})
                continue
            if routing:
                alt["routing_policy"] = routing
            self.replay({**alt, "_knob": words})

    def _headroom(self) -> None:
        """HEADROOM times the maximum for the best row when none meets the SLO, else for the cheapest row that
        misses it while costing less than the best meeting it (more replicas may make it the cheaper answer)."""
        best = self.best()
        if best is None or not self.space.headroom:
            return
        cost = "cost_usd" if self._priced() else "gpu_hours"
        base = best if not meets(best) else min(
            (r for r in self.out.rows if r["name"] != "current" and not meets(r) and r[cost] < best[cost]),
            key=lambda r: r[cost], default=None)
        if base is None:
            return
        cfg = base["config"]
        engine = {k: v for k, v in cfg["engine_settings"].items() if k != "tensor_parallel_size"}
        alt, _, _ = sized(self.service, self.shape, cfg["gpu_type"], cfg["gpus_per_replica"], engine, self.slo,
                          HEADROOM)
        if alt is not None and alt["max_replicas"] > cfg["max_replicas"]:
            if "routing_policy" in cfg:
                alt["routing_policy"] = cfg["routing_policy"]
            self.replay({**alt, "_knob": base["knob"]})


def search(service, load: Load, space: Space | None = None, cpu_budget_s: float = SEARCH_CPU_BUDGET_S,
           progress=None) -> dict:
    """The Pareto front of cost against TTFT-budget and ITL attainment over the replayed configurations, the
    cheapest one meeting the SLO (`chosen`, or None with `reason`), the current configuration's replay, and what
    the planner pruned. Raises LoadError when the load is larger than a run replays, ScenarioError when the
    service's mode is not modelled."""
    check_size(len(load.requests), load.duration_s)
    scenario(service, {}, "current")  # a service the lab cannot model is refused before anything replays
    started = time.monotonic()
    searcher = Searcher(service, load, space or default_space(service), cpu_budget_s, progress)
    out = searcher.run()
    cost = "cost_usd" if searcher._priced() else "gpu_hours"
    current = next((r for r in out.rows if r["name"] == "current"), None)
    front = pareto([r for r in out.rows if r["name"] != "current"], cost)
    chosen = next((r for r in front if meets(r)), None)
    reason = None
    if chosen is None:
        best = searcher.best()
        reason = (f"no configuration replayed meets {TTFT_AIM:.0%} of TTFT budgets and {ITL_AIM:.0%} of ITL"
                  + (f"; the best, {best['name']}, meets {best['slo_attainment']:.1%} and "
                     f"{best['itl_slo_attainment']:.1%}" if best else ""))
    return {"service": str(service), "source": load.source, "requests": len(load.requests),
            "duration_s": round(load.duration_s, 3), "cost_axis": cost, "aims": {"ttft": TTFT_AIM, "itl": ITL_AIM},
            "front": front, "chosen": chosen, "reason": reason, "current": current,
            "replayed": len(out.rows), "pruned": out.pruned, "refused": out.refused, "stopped": out.stopped,
            "wall_s": round(time.monotonic() - started, 3), "cpu_s": round(time.thread_time() - searcher.cpu0, 3)}
