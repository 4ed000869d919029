"""The shape of a service's rollout strategy (stored as JSON on InferenceService.rollout).

{"strategy": "rolling"}  (the default: Kubernetes replaces the pods in a rolling update)
{"strategy": "canary",
 "steps": [{"weight": 5, "min_duration_seconds": 300, "analysis": true},
           {"weight": 25, "min_duration_seconds": 300, "analysis": true},
           {"weight": 100}],
 "tolerance": 0.2, "min_requests": 100, "max_extensions": 2, "when_exhausted": "hold"}

Each step sends `weight` % of the requests to the new revision for at least `min_duration_seconds`; with
`analysis` (the default) the step's window must pass the canary analysis (apps/rollouts/analysis.py, judged
with `tolerance` and `min_requests`) before the next step. Weights rise and the last is 100: reaching it is
the promotion (the new revision becomes the stable one), so it has no duration or analysis of its own. An
inconclusive window extends the step up to `max_extensions` times, then the rollout follows
`when_exhausted` (hold for a person, or roll back). Both revisions run at once during a canary, so the
quota check counts the service's GPUs twice (apps/serving/validation.py).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from apps.serving.choices import RolloutStrategy

MAX_STEPS = 10
MIN_STEP_SECONDS, MAX_STEP_SECONDS = 60, 86_400
MAX_EXTENSIONS = 10
WHEN_EXHAUSTED = ("hold", "roll_back")
DEFAULTS = {"tolerance": 0.2, "min_requests": 100, "max_extensions": 2, "when_exhausted": "hold"}
STEP_DEFAULTS = {"min_duration_seconds": 300, "analysis": True}
CANARY_KEYS = {"strategy", "steps", *DEFAULTS}
STEP_KEYS = {"weight", "min_duration_seconds", "analysis"}


def default_rollout() -> dict:
    return {"strategy": RolloutStrategy.ROLLING.value}


def is_canary(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("strategy") == RolloutStrategy.CANARY


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rollout_errors(spec: Any, *, serverless: bool) -> list[str]:
    """Readable problems with a rollout strategy, each starting with the key it is about; empty when valid."""
    if not isinstance(spec, dict):
        return ["rollout must be an object."]
    strategy = spec.get("strategy", RolloutStrategy.ROLLING)
    if strategy not in RolloutStrategy.values:
        return [f"strategy {strategy!r} is not one of {', '.join(RolloutStrategy.values)}."]
    if strategy == RolloutStrategy.ROLLING:
        extra = set(spec) - {"strategy"}
        return [f"strategy: a rolling update takes no {', '.join(sorted(extra))}."] if extra else []
    problems: list[str] = []
    unknown = set(spec) - CANARY_KEYS
    if unknown:
        problems.append(f"strategy: unknown canary keys {', '.join(sorted(unknown))}.")
    if serverless:
        problems.append("strategy: a serverless service rolls out by rolling update (a canary needs both "
                        "revisions serving, and serverless pools scale to zero).")
    problems += _step_errors(spec.get("steps"))
    tolerance = spec.get("tolerance", DEFAULTS["tolerance"])
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 < tolerance <= 1:
        problems.append(f"tolerance must be a number above 0 and at most 1 (0.2 allows 20 % worse); got {tolerance!r}.")
    min_requests = spec.get("min_requests", DEFAULTS["min_requests"])
    if not _whole(min_requests) or not 10 <= min_requests <= 100_000:
        problems.append(f"min_requests must be a whole number from 10 to 100000; got {min_requests!r}.")
    extensions = spec.get("max_extensions", DEFAULTS["max_extensions"])
    if not _whole(extensions) or not 0 <= extensions <= MAX_EXTENSIONS:
        problems.append(f"max_extensions must be a whole number from 0 to {MAX_EXTENSIONS}; got {extensions!r}.")
    when = spec.get("when_exhausted", DEFAULTS["when_exhausted"])
    if when not in WHEN_EXHAUSTED:
        problems.append(f"when_exhausted must be one of {', '.join(WHEN_EXHAUSTED)}; got {when!r}.")
    return problems


def _step_errors(steps: Any) -> list[str]:
    if not isinstance(steps, list) or not steps:
        return ["steps: a canary needs a list of steps, each {weight, min_duration_seconds, analysis}, ending at "
                "weight 100."]
    if len(steps) > MAX_STEPS:
        return [f"steps: at most {MAX_STEPS} steps; got {len(steps)}."]
    problems: list[str] = []
    weights: list[int] = []
    for index, step in enumerate(steps, start=1):
        if not isinstance(step, dict):
            problems.append(f"steps: step {index} must be an object.")
            continue
        unknown = set(step) - STEP_KEYS
        if unknown:
            problems.append(f"steps: step {index} has unknown keys {', '.join(sorted(unknown))}.")
        weight = step.get("weight")
        if not _whole(weight) or not 1 <= weight <= 100:
            problems.append(f"steps: step {index}'s weight must be a whole percentage from 1 to 100; got {weight!r}.")
        else:
            weights.append(weight)
        duration = step.get("min_duration_seconds", STEP_DEFAULTS["min_duration_seconds"])
        if not _whole(duration) or not MIN_STEP_SECONDS <= duration <= MAX_STEP_SECONDS:
            problems.append(f"min_duration_seconds: step {index}'s must be a whole number of seconds from "
                            f"{MIN_STEP_SECONDS} to {MAX_STEP_SECONDS}; got {duration!r}.")
        if not isinstance(step.get("analysis", True), bool):
            problems.append(f"steps: step {index}'s analysis must be true or false.")
    if problems:
        return problems
    if any(later <= earlier for earlier, later in pairwise(weights)):
        problems.append(f"steps: weights must rise from step to step; got {', '.join(map(str, weights))}.")
    if weights[-1] != 100:
        problems.append(f"steps: the last step must send 100 % to the new revision (the promotion); "
                        f"it sends {weights[-1]} %.")
    if len(weights) < 2:
        problems.append("steps: a canary needs at least one step below 100 before the promotion.")
    return problems


def canary_steps(spec: dict) -> list[dict]:
    """The steps with their defaults filled in (valid specs only)."""
    return [{**STEP_DEFAULTS, **step} for step in spec["steps"]]


def canary_setting(spec: dict, name: str):
    """A canary-wide setting (tolerance, min_requests, max_extensions, when_exhausted) or its default."""
    return spec.get(name, DEFAULTS[name])
