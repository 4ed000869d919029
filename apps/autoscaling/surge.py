"""Surges: the built-in autoscaler between its periodic evaluations (pure, like `rules`).

Each scrape (every 5 s) can meet a step in the load before the next evaluation (every 15 s), as Knative's
autoscaler meets one in its panic mode: the live control plane checks the services a scrape shows stepping up
(workers/surge.py), the fleet replay every scrape (apps/whatif/fleet.py). Only a scale-up is made here; the
periodic evaluation does everything else, the forecast's steps included.
"""

from __future__ import annotations

from dataclasses import replace

from apps.autoscaling.rules import Evaluation, History, Observation, evaluate
from apps.autoscaling.signals import BURST_DISPERSION, dispersion
from apps.serving.choices import PolicySelect, RatePolicyType
from apps.serving.scaling_policy import PoolPolicy, RatePolicy, ScalingRules

# A surge scales up as fast as Knative's panic mode allows (max-scale-up-rate 1000 %, ±4 pods always).
SURGE_SCALE_UP = ScalingRules(0, PolicySelect.MAX, (RatePolicy(RatePolicyType.PERCENT, 1000, 15),
                                                   RatePolicy(RatePolicyType.PODS, 4, 15)))
SURGE_FACTOR = 2.0  # ... when the signals ask for this many times the current replicas (Knative's panic: 200 %)


def stepped(prompt_tps: float | None, waiting_tokens: float | None, level: float | None) -> bool:
    """Whether a scrape shows a step from the smoothed load `level` (prompt tokens/s; None: not measured yet):
    prompt tokens arriving at `SURGE_FACTOR` × it or more, or more prompt tokens waiting than a second of it
    brings (any, before it is measured)."""
    if (waiting_tokens or 0.0) > (level or 0.0):
        return True
    return None not in (prompt_tps, level) and prompt_tps >= SURGE_FACTOR * level


def surge(policy: PoolPolicy, obs: Observation, history: History) -> Evaluation | None:
    """An evaluation between the periodic ones, from the latest scrape, that can only scale up (None: no surge).

    A step in the load is met up to a period sooner, and at once: when prompt tokens arrive at `SURGE_FACTOR` ×
    the smoothed load of the periodic evaluations or more, or more prompt tokens wait than a second of that load
    brings (any, before the load is measured), the pool's arrivals have come
    smoothly so far (the periodic intervals' dispersion at most `BURST_DISPERSION`: where they come in bursts
    shorter than the period, a burst is over before a replica could start), and the signals then ask for at least
    `SURGE_FACTOR` × the current replicas, the pool scales with `SURGE_SCALE_UP` (Knative's panic mode) instead
    of its own scale-up policies. The forecast keeps its periodic steps: its state stays as it was."""
    if obs.replicas == 0 or obs.rates is None:
        return None
    if not stepped(obs.prompt_tokens_per_s, obs.waiting_prompt_tokens, (history.forecast or {}).get("level")):
        return None
    d = dispersion((history.forecast or {}).get("counts", []))
    if d is not None and d > BURST_DISPERSION:
        return None  # arrivals in bursts shorter than the period: this one is over before a replica could start
    ev = evaluate(replace(policy, scale_up=SURGE_SCALE_UP), obs, history)
    if ev.raw < SURGE_FACTOR * obs.replicas or ev.desired <= ev.current:
        return None
    return replace(ev, history=replace(ev.history, forecast=history.forecast),
                   reason=f"surge between evaluations (scale-up at {SURGE_SCALE_UP.policies[0].words(True)}): "
                          f"{ev.reason}")
