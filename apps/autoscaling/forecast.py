"""A short-horizon forecast of a pool's load, for warming replicas up ahead of it: Holt's linear exponential
smoothing with a damped trend (Gardner and McKenzie's form; no season) of the prompt tokens/s and arrivals/s
of each evaluation interval:

    level_t = α·x_t + (1 − α)·(level_{t−1} + φ·trend_{t−1})
    trend_t = β·(level_t − level_{t−1}) + (1 − β)·φ·trend_{t−1}
    forecast(h) = level_t + (φ + φ² + … + φ^k)·trend_t,  k = h / period     (never below 0)

α = 0.5 follows a change within two or three periods; β = 0.3 lets the trend of a ramp show after about three;
φ = 0.9 damps the trend so that a step (a spike's start or end) is not extrapolated into a ramp for long.
The horizon is the pool's measured cold start plus one evaluation period: a replica asked for now serves
then. Every forecast is checked when its time comes: relative error |actual − forecast| / max(actual,
forecast, a floor) above `WRONG_BOUND` marks the forecast wrong, and a wrong forecast steers nothing until
`RIGHT_AGAIN` consecutive checks are within the bound again. A daily season (Holt-Winters) is not fitted: a
pool's stored raw series is kept for hours, not days.

Pure: the state is a plain dict kept in the autoscaler's history, so the beat task, the replay command and
the fleet simulation run the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

ALPHA = 0.5
BETA = 0.3
PHI = 0.9
WRONG_BOUND = 0.5  # a forecast off by more than half of what came is wrong
RIGHT_AGAIN = 2  # checks within the bound before a wrong forecast steers again
WARMUP = 3  # updates before a forecast is judged (the trend needs a few to show)
FLOOR_TPS = 200.0  # prompt tokens/s below which errors are not judged relative (a quiet pool's noise)


@dataclass(frozen=True)
class Forecast:
    """What the forecast says at `t` for `t + horizon_s`, and whether it may steer."""

    prompt_tps: float
    arrivals_per_s: float
    horizon_s: float
    trusted: bool
    last_error: float | None  # the relative error of the latest checked forecast
    words: str


def _smooth(level: float | None, trend: float, x: float) -> tuple[float, float]:
    if level is None:
        return x, 0.0
    new = ALPHA * x + (1 - ALPHA) * (level + PHI * trend)
    return new, BETA * (new - level) + (1 - BETA) * PHI * trend


def damped_steps(steps: float) -> float:
    """φ + φ² + … + φ^k for k = `steps` (a fractional k by its whole part plus the share of the next term)."""
    whole = int(steps)
    total = sum(PHI ** i for i in range(1, whole + 1))
    return total + (steps - whole) * PHI ** (whole + 1)


def relative_error(actual: float, predicted: float) -> float:
    return abs(actual - predicted) / max(actual, predicted, FLOOR_TPS)


def update(state: dict | None, t: float, prompt_tps: float, arrivals_per_s: float, period_s: float,
           horizon_s: float) -> tuple[dict, Forecast]:
    """Fold one interval's load into the state; returns the new state and the forecast for `t + horizon_s`."""
    state = dict(state or {})
    due = [p for p in state.get("pending", []) if p[0] <= t + 1e-6]
    pending = [p for p in state.get("pending", []) if p[0] > t + 1e-6]
    trusted, right, error = state.get("trusted", True), state.get("right", 0), state.get("error")
    for _, predicted in due:
        error = relative_error(prompt_tps, predicted)
        if error > WRONG_BOUND:
            trusted, right = False, 0
        else:
            right += 1
            if right >= RIGHT_AGAIN:
                trusted = True
    level, trend = _smooth(state.get("level"), state.get("trend", 0.0), prompt_tps)
    rlevel, rtrend = _smooth(state.get("rlevel"), state.get("rtrend", 0.0), arrivals_per_s)
    steps = damped_steps(horizon_s / period_s)
    predicted = max(level + steps * trend, 0.0)
    predicted_rps = max(rlevel + steps * rtrend, 0.0)
    seen = state.get("seen", 0) + 1
    if seen > WARMUP:  # the first forecasts know no trend yet: not judged
        pending.append([t + horizon_s, predicted])
    new = {**state, "level": level, "trend": trend, "rlevel": rlevel, "rtrend": rtrend, "pending": pending[-64:],
           "trusted": trusted, "right": right, "error": error, "seen": seen}
    if trusted:
        words = f"forecast {predicted_rps:.1f} req/s, {predicted:.0f} prompt tokens/s in {horizon_s:.0f} s"
    else:
        words = (f"forecast ignored: off by {error:.0%} (bound {WRONG_BOUND:.0%}) until {RIGHT_AGAIN} checks "
                 "are within it")
    return new, Forecast(predicted, predicted_rps, horizon_s, trusted, error, words)
