"""Running the decision function over a scenario (`manage.py autoscale_replay`): pure, no database.

A scenario is {"policy": {...}, "rates"?: {...}, "steps": [{"t", "replicas", "pods": [{"ready", "metrics"}],
...}]}; `rates` (a replica's prefill_tokens_per_s, decode_base_s, decode_per_seq_s) turns the signals on; every
step is evaluated with the history the earlier steps left, and every change a step recommends is taken
as made at that step's time (it counts against the rate policies' periods).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from apps.autoscaling.rules import History, Observation, PodSample, evaluate, record_scale
from apps.serving.scaling_policy import PolicyError, replay_policy
from capacity.roofline import ReplicaRates

OPTIONAL_NUMBERS = ("ttft_p95_s", "ttft_floor_p95_s", "itl_p95_s", "idle_for_s", "cold_start_s", "queue_time_p95_s",
                    "waiting_prompt_tokens", "prompt_tokens_per_s", "arrivals_per_s")
RATE_FIELDS = ("prefill_tokens_per_s", "decode_base_s", "decode_per_seq_s")


def parse_rates(rates: Any) -> ReplicaRates | None:
    """The scenario's replica rates (None when absent); raises PolicyError naming every bad field."""
    if rates is None:
        return None
    if not isinstance(rates, dict):
        raise PolicyError(["rates must be an object with " + ", ".join(RATE_FIELDS) + "."])
    problems = [f"rates: unknown keys: {', '.join(sorted(set(rates) - set(RATE_FIELDS)))}."] \
        if set(rates) - set(RATE_FIELDS) else []
    problems += [f"rates.{name} must be a number greater than 0." for name in RATE_FIELDS
                 if not _is_number(rates.get(name)) or rates[name] <= 0]
    if problems:
        raise PolicyError(problems)
    return ReplicaRates(*(float(rates[name]) for name in RATE_FIELDS))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_steps(steps: Any) -> list[Observation]:
    """The scenario's steps as Observations; raises PolicyError naming every bad field."""
    if not isinstance(steps, list) or not steps:
        raise PolicyError(["steps must be a non-empty list."])
    problems, out, last_t = [], [], None
    for i, step in enumerate(steps):
        at = f"steps[{i}]"
        if not isinstance(step, dict):
            problems.append(f"{at} must be an object.")
            continue
        t, replicas, pods = step.get("t"), step.get("replicas"), step.get("pods", [])
        if not _is_number(t):
            problems.append(f"{at}.t must be a number of seconds.")
        elif last_t is not None and t < last_t:
            problems.append(f"{at}.t ({t}) is earlier than the step before ({last_t}).")
        else:
            last_t = t
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            problems.append(f"{at}.replicas must be a whole number, 0 or more.")
        if not isinstance(pods, list):
            problems.append(f"{at}.pods must be a list.")
            pods = []
        samples = []
        for j, pod in enumerate(pods):
            if not isinstance(pod, dict) or not isinstance(pod.get("ready", True), bool) \
                    or not isinstance(pod.get("metrics", {}), dict) \
                    or not all(_is_number(v) for v in pod.get("metrics", {}).values()):
                problems.append(f"{at}.pods[{j}] must be {{\"ready\": bool, \"metrics\": {{name: number}}}}.")
                continue
            samples.append(PodSample(pod.get("ready", True), dict(pod.get("metrics", {}))))
        extra = {}
        for name in OPTIONAL_NUMBERS:
            if step.get(name) is not None:
                if not _is_number(step[name]) or step[name] < 0:
                    problems.append(f"{at}.{name} must be a number, 0 or more.")
                else:
                    extra[name] = float(step[name])
        pending = step.get("pending_activation", 0)
        if not isinstance(pending, int) or isinstance(pending, bool) or pending < 0:
            problems.append(f"{at}.pending_activation must be a whole number, 0 or more.")
            pending = 0
        if not problems:
            out.append(Observation(t=float(t), replicas=replicas, pods=tuple(samples),
                                   pending_activation=pending, **extra))
    if problems:
        raise PolicyError(problems)
    return out


def replay(scenario: Any) -> list[dict]:
    """One result object per step: t, current, desired, raw, stabilized, limited, rule, reason, metrics."""
    if not isinstance(scenario, dict):
        raise PolicyError(["The scenario must be a JSON object with policy and steps."])
    unknown = set(scenario) - {"policy", "steps", "rates"}
    problems = [f"unknown top-level keys: {', '.join(sorted(unknown))}."] if unknown else []
    try:
        policy = replay_policy(scenario.get("policy"))
    except PolicyError as exc:
        problems += exc.problems
    try:
        steps = parse_steps(scenario.get("steps"))
    except PolicyError as exc:
        problems += exc.problems
    try:
        rates = parse_rates(scenario.get("rates"))
    except PolicyError as exc:
        problems += exc.problems
    if problems:
        raise PolicyError(problems)
    history = History()
    out = []
    for obs in steps:
        result = evaluate(policy, replace(obs, rates=rates) if rates else obs, history)
        history = result.history
        if result.changes:
            history = record_scale(history, obs.t, result.current, result.desired, policy.longest_period_s)
        out.append(result.as_dict())
    return out
