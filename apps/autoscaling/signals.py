"""Signals that replicas can change, for the built-in autoscaler (pure, like `rules`).

Each turns what the pool's engines report into the replicas that would bring it back to target, with the
replica's own rates (`capacity.roofline.ReplicaRates`: prompt tokens prefilled per second, decode step time
against running sequences; the one definition kubesim's engines step by):

- queue time: the interval's p95 of vLLM's `vllm:request_queue_time_seconds` (SGLang: its queue time
  histogram) against half the TTFT allowance;
- prefill backlog: prompt tokens waiting (in the engines and held at the router) must drain within half the
  allowance: ceil(tokens / (rate × allowance / 2));
- prefill load: prompt tokens/s arriving against the utilisation a replica can carry: at most
  `PREFILL_UTILISATION` for TTFT, and, with an ITL target, at most 1 − decode step / ITL target (prefill
  steps stall the decodes batched with them, so the share of time spent prefilling adds to every token's
  latency);
- decode pressure: running sequences against how many one replica decodes within the ITL target beside its
  share of prefill, and KV-cache usage against `KV_TARGET`;
- the forecast (`forecast`): prompt tokens/s a cold start ahead, steering while it has been right.

TTFT itself enters only through the SLO guard's part above the prompts' prefill floor (`rules`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import pairwise

from apps.autoscaling import forecast as fc

PREFILL_UTILISATION = 0.4  # of a replica's prefill rate, for TTFT alone (queueing grows as u / (1 − u))
KV_TARGET = 0.9  # KV-cache usage above this preempts soon
DOWN_MARGIN = 0.95  # a scale-down needs the load to fit in fewer replicas at this share of the target
DECAY_WINDOW_S = 60  # the scale-down window once forecast and queue agree a burst is over
DECAY_SHARE = 0.3  # ... that is, the forecast is under this share of the recent peak, falling, and nothing waits
DECAY_LOOKBACK = 20  # evaluations the recent peak is taken over (5 minutes at 15 s)
BURST_PLAN = 0.95  # the share of the ITL target the mean token time is planned at when arrivals come in bursts
BURST_DISPERSION = 3.0  # ... that is, when the recent intervals' arrival counts vary more than this × a Poisson's
# What measures work still queued: it asks for no replica while the current replicas drain the queue before a
# replica asked now could start (`Outcome.drains`). Running sequences are not in it: a replica that comes after the
# queue is gone still takes new arrivals' prefills off the decodes, which is what ITL needs.
QUEUED = ("queue_time_p95_s", "waiting_requests_per_replica")
STEP_FACTOR = 2.0  # arrivals at this many times their smoothed rate are a step in the load (Knative's panic: 200 %)
BAND_POINTS = 240  # forecast band points kept for the replicas chart (an hour at 15 s)


@dataclass(frozen=True)
class Signal:
    name: str
    value: float
    target: float
    replicas: int
    words: str

    def as_metric(self) -> dict:
        return {"name": self.name, "value": round(self.value, 4), "target": round(self.target, 4),
                "ratio": round(self.value / self.target, 4) if self.target else None, "replicas": self.replicas,
                "missing": 0}


@dataclass(frozen=True)
class Outcome:
    signals: tuple[Signal, ...] = ()
    forecast_state: dict = field(default_factory=dict)
    forecast: fc.Forecast | None = None
    decay: bool = False  # forecast and queue agree the burst is over: the short scale-down window applies
    decay_words: str = ""
    # Why the queue measures (QUEUED, and TTFT in the SLO guard) ask for no replica: the current replicas drain
    # what waits before a replica asked now could start serving ("": they may ask).
    drains: str = ""

    @property
    def top(self) -> Signal | None:
        return max(self.signals, key=lambda s: s.replicas, default=None)


def _ceil(x: float) -> int:
    return max(math.ceil(x - 1e-9), 1)


def _pods_sum(obs, name: str) -> tuple[float, int]:
    values = [p.metrics[name] for p in obs.pods if p.ready and p.metrics.get(name) is not None]
    return sum(values), len(values)


def prefill_utilisation(policy, rates, running_per_replica: float, plan: float = 1.0) -> float:
    """The share of a replica's prefill rate it may be loaded to: the TTFT bound, and with an ITL target the
    time left once a decode step of the running sequences fits the target."""
    u = PREFILL_UTILISATION
    if policy.itl_p95_s:
        u = min(u, 1.0 - rates.decode_step_s(running_per_replica) / (policy.itl_p95_s * plan))
    return min(max(u, 0.1), PREFILL_UTILISATION)


def itl_s(rates, n: float, prompt_tps: float, running: float, arrivals_per_s: float) -> float:
    """The mean time between a sequence's tokens when n replicas share the load: each second a replica spends
    the share prompt_tps / (n·R) prefilling, about one step per arriving prompt (arrivals_per_s / n), which
    also decodes every running sequence, and the rest in decode steps of running / n sequences:
        tokens per second = (1 − share) / step + arrivals / n,  ITL = 1 / that."""
    share = prompt_tps / (n * rates.prefill_tokens_per_s)
    if share >= 1:
        return math.inf
    return 1.0 / ((1 - share) / rates.decode_step_s(running / n) + arrivals_per_s / n)


def replicas_for(policy, rates, prompt_tps: float, running: float, arrivals_per_s: float = 0.0,
                 plan: float = 1.0) -> float:
    """Replicas (a real number, to 0.01) that carry the load: at most `PREFILL_UTILISATION` of the prefill
    rate R each, and with an ITL target the fewest for which `itl_s` is within it (found by bisection)."""
    need = max(prompt_tps / (rates.prefill_tokens_per_s * PREFILL_UTILISATION), 0.01)
    itl = policy.itl_p95_s * plan if policy.itl_p95_s else None
    if not itl or itl <= rates.decode_base_s or itl_s(rates, need, prompt_tps, running, arrivals_per_s) <= itl:
        return need
    low, high = need, max(need, 1.0) * 2
    while itl_s(rates, high, prompt_tps, running, arrivals_per_s) > itl and high < 10_000:
        low, high = high, high * 2
    while high - low > 0.01:
        mid = (low + high) / 2
        low, high = (mid, high) if itl_s(rates, mid, prompt_tps, running, arrivals_per_s) > itl else (low, mid)
    return high


def forecast_band(policy, rates, forecast: fc.Forecast, running: float, plan: float = 1.0) -> tuple[int, int, int]:
    """The replicas the forecast load asks for, and below and above it those of the load off by the forecast's
    latest checked error (the bound before any check): (low, forecast, high), what the replicas chart draws."""
    error = min(forecast.last_error if forecast.last_error is not None else fc.WRONG_BOUND, 1.0)
    return tuple(_ceil(replicas_for(policy, rates, forecast.prompt_tps * k, running, forecast.arrivals_per_s * k,
                                    plan))
                 for k in (1 - error, 1.0, 1 + error))


def dispersion(counts: list[float]) -> float | None:
    """The index of dispersion of recent intervals' arrival counts, from successive differences (von Neumann:
    half the mean squared difference over the mean count), so a ramp or a daily rise does not count: about 1
    for Poisson arrivals, far above it when they come in bursts shorter than the interval (None: fewer than 8
    intervals, or none arrived)."""
    if len(counts) < 8:
        return None
    mean = sum(counts) / len(counts)
    if mean <= 0:
        return None
    return sum((b - a) ** 2 for a, b in pairwise(counts)) / (2 * (len(counts) - 1)) / mean


def _queue_signal(obs, n: int, allowance: float) -> Signal | None:
    """Queue time p95 against half the TTFT allowance (None: not measured, or a burst already served)."""
    if obs.queue_time_p95_s is None or not (obs.waiting_prompt_tokens is None or obs.waiting_prompt_tokens > 0
                                            or obs.queue_time_p95_s <= allowance / 2):
        # (A queue time over target with nothing waiting any more was a burst already served: no replica.)
        return None
    q, target = obs.queue_time_p95_s, allowance / 2
    wanted = max(n + 1, math.ceil(n * min(q / target, 2.0))) if q > target else n if q > target / 4 else 1
    return Signal("queue_time_p95_s", q, target, wanted, f"queue time p95 {q:.2f} s {'>' if q > target else '≤'} "
                                                         f"{target:.2f} s")


def _backlog_signal(obs, n: int, rate: float, allowance: float) -> tuple[Signal | None, str]:
    """Prompt tokens waiting against the replicas' prefill rate, and why the queue asks for no replica ("": it may).

    Replicas asked now serve a cold start later: only the backlog the ready replicas' spare rate has not drained
    by then asks for any, enough for all of them to drain it within half the allowance."""
    if obs.waiting_prompt_tokens is None:
        return None, ""
    w, cold = obs.waiting_prompt_tokens, obs.cold_start_s or 0.0
    # Only ready replicas prefill until a replica asked now could serve: one still starting serves for an unknown
    # part of that cold start, so it is not counted as draining the backlog.
    ready = sum(1 for p in obs.pods if p.ready) if obs.pods else n
    left = w - max(ready * rate - (obs.prompt_tokens_per_s or 0.0), 0.0) * cold
    wanted = _ceil(left / (rate * allowance / 2)) if left > 0 else 1
    words = (f"{w:.0f} prompt tokens waiting = {w / (n * rate):.2f} s of prefill at {n} replica(s), "
             f"{max(left, 0):.0f} left after a {cold:.0f} s cold start (drain within {allowance / 2:.2f} s)")
    drains = ""
    if left <= 0 and obs.cold_start_s is not None:
        # A queue (or a TTFT p95 made in one) that is gone before a new replica serves asks for none.
        drains = (f"the {ready} ready replica(s) drain the {w:.0f} prompt tokens waiting before a replica asked now "
                  f"would serve ({cold:.0f} s cold start)")
    elif obs.cold_start_s is None and any(not p.ready for p in obs.pods):
        # No cold start measured yet and replicas still starting: they come up before any asked now, so the
        # backlog waits for them instead of asking for more.
        wanted = min(wanted, n)
        words = (f"{w:.0f} prompt tokens waiting for the {n} replica(s) starting (no cold start measured yet: "
                 f"replicas asked now would come up after them)")
    return Signal("prefill_backlog_s", w / (n * rate), allowance / 2, wanted, words), drains


def step_running(running: float, arrivals_per_s: float, smoothed_rps: float | None, d: float | None) -> float:
    """The running sequences to plan ITL for: those running now, or after a step in arrivals (at least
    `STEP_FACTOR` × their smoothed rate, in arrivals that have come smoothly so far: dispersion at most
    `BURST_DISPERSION`, or not yet known) what the step brings once its requests decode. By Little's law running
    sequences are arrivals/s × the time a request runs, so they grow with the arrival rate; right after a step the
    engines still show the old load's. In bursts shorter than the period a burst's requests finish before a replica
    asked now could start, so there it is the running sequences alone."""
    if not smoothed_rps or arrivals_per_s < STEP_FACTOR * smoothed_rps or (d is not None and d > BURST_DISPERSION):
        return running
    return running * arrivals_per_s / smoothed_rps


def _load_signals(policy, obs, state: dict, period_s: float, running: float, plan: float,
                  d: float | None) -> tuple[list[Signal], dict, fc.Forecast | None]:
    """Prefill load (up on this interval's load, down only where the smoothed load fits fewer replicas with a
    margin, so one quiet interval does not start a scale-down) and the trusted forecast a cold start ahead; without
    a load measured, decode pressure from the running sequences alone."""
    rates, n = obs.rates, obs.replicas
    rate, out = rates.prefill_tokens_per_s, []
    if obs.prompt_tokens_per_s is None:
        with_running = _pods_sum(obs, "running_requests_per_replica")[1]
        if policy.itl_p95_s and with_running:
            wanted = _ceil(replicas_for(policy, rates, 0.0, running, plan=plan))
            out.append(Signal("decode_running", running / with_running, running / wanted, wanted,
                              f"{running / with_running:.1f} running per replica: {wanted} replica(s) decode "
                              f"{running:.0f} within the ITL target"))
        return out, state, None
    tps, rps = obs.prompt_tokens_per_s, obs.arrivals_per_s or 0.0
    horizon = (obs.cold_start_s or 0.0) + period_s
    # A step is judged against the arrivals before this interval (as the surge check judges it).
    stepped = step_running(running, rps, state.get("rlevel"), dispersion(state.get("counts", [])))
    state, forecast = fc.update(state, obs.t, tps, rps, period_s, horizon)
    up = _ceil(replicas_for(policy, rates, tps, stepped, rps, plan))
    down = _ceil(replicas_for(policy, rates, max(state["level"], 0.0), running, max(state["rlevel"], 0.0),
                              plan) / DOWN_MARGIN)
    u = prefill_utilisation(policy, rates, running / max(_pods_sum(obs, "running_requests_per_replica")[1], 1), plan)
    out.append(Signal("prefill_utilisation", tps / (n * rate), u, up if up > n else min(n, max(down, up)),
                      f"{tps:.0f} prompt tokens/s = {tps / (n * rate):.0%} of {n} replica(s)' prefill rate "
                      f"(target {u:.0%})" + (f"; a step to {rps:.1f} arrivals/s: {stepped:.0f} running expected"
                                             if stepped > running else "")
                      + (f"; arrivals in bursts (dispersion {d:.1f}): ITL planned at "
                                             f"{plan:.0%} of its target" if plan < 1 else "")))
    band = forecast_band(policy, rates, forecast, running, plan)
    state["band"] = [*state.get("band", []), [round(obs.t + horizon, 3), *band, forecast.trusted]][-BAND_POINTS:]
    if forecast.trusted:
        out.append(Signal("forecast_prompt_tps", forecast.prompt_tps, rate * u * n, band[1],
                          f"{forecast.words} → {band[1]} replica(s) (cold start {obs.cold_start_s or 0:.0f} s)"))
    return out, state, forecast


def _decay(obs, state: dict, forecast, allowance: float, plan: float, period_s: float) -> str:
    """Why the burst is over ("": it is not): what is coming (the forecast, or while it is not trusted the smoothed
    load it is built on) is under a share of the recent peak and falling, and nothing waits; never while arrivals
    come in bursts (plan < 1): there the next burst is due, and a pool let down fast meets it short."""
    quiet = (obs.waiting_prompt_tokens or 0) == 0 and (obs.queue_time_p95_s or 0.0) <= allowance / 8
    peak = max(state.get("recent", [0.0]))
    coming = forecast.prompt_tps if forecast is not None and forecast.trusted else state.get("level")
    if coming is None or not quiet or plan < 1.0 or obs.replicas <= 1 or peak <= fc.FLOOR_TPS \
            or coming > DECAY_SHARE * peak or state.get("trend", 0.0) > 0:
        return ""
    said = forecast.words if forecast is not None and forecast.trusted else \
        f"load {coming:.0f} prompt tokens/s ({forecast.words if forecast else 'smoothed; none measured now'})"
    return (f"burst over: {said}, under {DECAY_SHARE:.0%} of the last {DECAY_LOOKBACK * period_s:.0f} s' peak "
            f"{peak:.0f}, and no queue: scale-down window {DECAY_WINDOW_S} s")


def evaluate_signals(policy, obs, forecast_state: dict | None, period_s: float) -> Outcome:
    """The signals of one evaluation (none without the replica's rates or replicas), the forecast updated."""
    rates, n = obs.rates, obs.replicas
    if rates is None or n == 0:
        return Outcome(forecast_state=forecast_state or {})
    allowance = policy.ttft_p95_s or 2.0
    running = _pods_sum(obs, "running_requests_per_replica")[0]
    # Prefill stalls the decodes batched with it, and a token's time grows as 1 / (1 − prefill share): with
    # arrivals in bursts shorter than the interval, the interval's mean share understates it, so plan tighter.
    counts = [*(forecast_state or {}).get("counts", []), (obs.arrivals_per_s or 0.0) * period_s][-DECAY_LOOKBACK:]
    d = dispersion(counts)
    plan = BURST_PLAN if d is not None and d > BURST_DISPERSION else 1.0
    queue = _queue_signal(obs, n, allowance)
    backlog, drains = _backlog_signal(obs, n, rates.prefill_tokens_per_s, allowance)
    load, state, forecast = _load_signals(policy, obs, forecast_state or {}, period_s, running, plan, d)
    out = [x for x in (queue, backlog) if x is not None] + load
    if drains:
        out = [replace(x, replicas=min(x.replicas, n)) if x.name in QUEUED else x for x in out]
    kv, with_kv = _pods_sum(obs, "kv_cache_usage")
    if with_kv and kv / with_kv > KV_TARGET:
        out.append(Signal("kv_cache_usage", kv / with_kv, KV_TARGET, _ceil(n * kv / with_kv / KV_TARGET),
                          f"KV-cache usage {kv / with_kv:.0%} > {KV_TARGET:.0%}"))
    decay_words = _decay(obs, state, forecast, allowance, plan, period_s)
    if obs.prompt_tokens_per_s is not None:
        state["recent"] = [*state.get("recent", []), obs.prompt_tokens_per_s][-DECAY_LOOKBACK:]
    if obs.arrivals_per_s is not None:
        state = {**state, "counts": counts}
    return Outcome(tuple(out), state, forecast, bool(decay_words), decay_words, drains)
