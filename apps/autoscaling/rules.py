"""The built-in autoscaler's decision for one pool: Kubernetes HPA (autoscaling/v2) rules, exactly, as pure
functions, plus the LLM parts the HPA lacks (SLO guard, scale to zero and activation, cold start), the signals
replicas can change (`signals`) and, under them, the reactive rules' decision as a floor (`evaluate`).

Sources (reference/autoscaling-and-routing.md §1): kubernetes `pkg/controller/podautoscaler/
replica_calculator.go` (calcPlainMetricReplicas, groupPods) and `horizontal.go` (reconcileAutoscaler,
stabilizeRecommendationWithBehaviors, convertDesiredReplicasWithBehaviorRate, calculateScaleUp/Down
LimitWithScalingRules, getReplicasChangePerPeriod). No database and no clock: the caller passes the time
and the history, and gets the new history back, so the beat task, the replay command and the benchmark
run the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from apps.autoscaling.choices import ScalingRule
from apps.autoscaling.guard import metric_words, prefill_floor_words, replica_count, slo_guard
from apps.autoscaling.signals import DECAY_WINDOW_S, QUEUED, Outcome, evaluate_signals
from apps.serving.choices import PolicySelect, RatePolicyType
from apps.serving.scaling_policy import PoolPolicy, ScalingRules


@dataclass(frozen=True)
class PodSample:
    """One pod of the pool: a pod that is not ready, or lacks a metric, counts as missing for that metric."""

    ready: bool
    metrics: dict[str, float]


@dataclass(frozen=True)
class Observation:
    """What the pool looks like at time `t` (seconds on any clock the history uses)."""

    t: float
    replicas: int
    pods: tuple[PodSample, ...] = ()
    ttft_p95_s: float | None = None
    # The p95 of the interval's prompts' own prefill time on an idle replica (None: unknown): TTFT up to it
    # is the hardware's, not a queue's, and more replicas cannot shorten it.
    ttft_floor_p95_s: float | None = None
    itl_p95_s: float | None = None
    idle_for_s: float | None = None  # seconds without arrivals, running or waiting requests (None: unknown)
    pending_activation: int = 0  # requests held at zero replicas (by the router / activator)
    cold_start_s: float | None = None  # the last measured scale-up → Ready time
    # What the signals that replicas can change read (`signals`; all None: those signals are off). The
    # replica's own rates (capacity.roofline.ReplicaRates) turn them into replicas.
    rates: object | None = None
    queue_time_p95_s: float | None = None  # the interval's p95 of the engines' queue time
    waiting_prompt_tokens: float | None = None  # prompt tokens not yet prefilled: engines' queues and router's
    prompt_tokens_per_s: float | None = None  # prompt tokens arriving per second over the interval
    arrivals_per_s: float | None = None
    period_s: float = 15.0  # the evaluation period (the forecast's step)


@dataclass(frozen=True)
class History:
    """The HPA's memory of one pool: recent recommendations and the replica changes made."""

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_up_events: tuple[tuple[float, int], ...] = ()
    scale_down_events: tuple[tuple[float, int], ...] = ()
    forecast: dict = field(default_factory=dict)  # the load forecast's state (`forecast.update`)
    floor_recommendations: tuple[tuple[float, int], ...] = ()  # the reactive floor's own (`evaluate`)

    def as_dict(self) -> dict:
        return {"recommendations": [list(r) for r in self.recommendations],
                "scale_up_events": [list(e) for e in self.scale_up_events],
                "scale_down_events": [list(e) for e in self.scale_down_events], "forecast": self.forecast,
                "floor_recommendations": [list(r) for r in self.floor_recommendations]}

    @classmethod
    def from_dict(cls, data: dict | None) -> History:
        data = data or {}
        return cls(*(tuple((float(t), int(n)) for t, n in data.get(k, []))
                     for k in ("recommendations", "scale_up_events", "scale_down_events")),
                   forecast=dict(data.get("forecast") or {}),
                   floor_recommendations=tuple((float(t), int(n)) for t, n in data.get("floor_recommendations", [])))


@dataclass(frozen=True)
class MetricResult:
    name: str
    value: float | None  # the average over pods with the metric (what the HPA status reports)
    target: float
    ratio: float | None
    replicas: int | None  # this metric's recommendation; None when it could not be computed
    missing: int = 0

    def as_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "target": self.target, "ratio": self.ratio,
                "replicas": self.replicas, "missing": self.missing}


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: every intermediate result, the rule that decided or limited it, and why."""

    t: float
    current: int
    raw: int
    stabilized: int
    limited: int
    desired: int
    rule: str
    reason: str
    metrics: tuple[MetricResult, ...] = ()
    history: History = field(default_factory=History)
    held: bool = False  # a change within min..max was recommended but a window or a policy kept the count
    forecast: object | None = None  # the load forecast of this evaluation (forecast.Forecast), if any
    binds: bool = False  # the rules asked more than the pool's maximum, and the pool goes to it

    @property
    def changes(self) -> bool:
        return self.desired != self.current

    def as_dict(self) -> dict:
        return {"t": self.t, "current": self.current, "raw": self.raw, "stabilized": self.stabilized,
                "limited": self.limited, "desired": self.desired, "rule": self.rule, "reason": self.reason,
                "held": self.held, "metrics": [m.as_dict() for m in self.metrics]}


# --- replica_calculator.go --------------------------------------------------------------------------------


def metric_replicas(name: str, target: float, current: int, pods: tuple[PodSample, ...],
                    tolerance: float) -> MetricResult:
    """calcPlainMetricReplicas for a Pods metric with an AverageValue target.

    Ratio = mean over pods with the metric / target. Without missing pods: within tolerance (|1−ratio| ≤ tol)
    keep `current`, else ceil(ratio × pods with the metric). With missing pods: they count as the target on
    a scale-down and as 0 on a scale-up; if the new ratio is within tolerance or reverses direction, keep
    `current`; else ceil(new ratio × all pods), unless that moves the other way.
    """
    values = [p.metrics[name] for p in pods if p.ready and p.metrics.get(name) is not None]
    missing = len(pods) - len(values)
    if not values:
        return MetricResult(name, None, target, None, None, missing)
    usage = sum(values) / len(values)
    ratio = usage / target
    if missing == 0:
        if abs(1.0 - ratio) <= tolerance:
            return MetricResult(name, usage, target, ratio, current)
        return MetricResult(name, usage, target, ratio, math.ceil(ratio * len(values)))
    filled = values + [target if ratio < 1.0 else 0.0] * missing
    new_ratio = sum(filled) / len(filled) / target
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return MetricResult(name, usage, target, ratio, current, missing)
    replicas = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        replicas = current
    return MetricResult(name, usage, target, ratio, replicas, missing)


# --- horizontal.go ----------------------------------------------------------------------------------------


def stabilize(rules_up: ScalingRules, rules_down: ScalingRules, history: History, t: float, current: int,
              desired: int) -> tuple[int, History]:
    """stabilizeRecommendationWithBehaviors: up = min of the recommendations newer than the scale-up window
    (and this one), down = max of those newer than the scale-down window; result clamp(current, up, down).
    The raw recommendation is recorded (replacing one older than both windows)."""
    up_cutoff = t - rules_up.stabilization_window_s
    down_cutoff = t - rules_down.stabilization_window_s
    up, down = desired, desired
    old_index = None
    for i, (when, rec) in enumerate(history.recommendations):
        if when > up_cutoff:
            up = min(up, rec)
        if when > down_cutoff:
            down = max(down, rec)
        if when < up_cutoff and when < down_cutoff:
            old_index = i
    result = min(max(current, up), down)
    recs = list(history.recommendations)
    if old_index is not None:
        recs[old_index] = (t, desired)
    else:
        recs.append((t, desired))
    return result, replace(history, recommendations=tuple(recs))


def change_in_period(period_s: int, events: tuple[tuple[float, int], ...], t: float) -> int:
    """getReplicasChangePerPeriod: replicas changed by events newer than `period_s` before `t`."""
    cutoff = t - period_s
    return sum(n for when, n in events if when > cutoff)


def period_start_replicas(current: int, history: History, period_s: int, t: float) -> int:
    """The replica count at the start of the policy's period: current, less what was added, plus what was removed."""
    return (current - change_in_period(period_s, history.scale_up_events, t)
            + change_in_period(period_s, history.scale_down_events, t))


def scale_up_limit(current: int, history: History, rules: ScalingRules, t: float) -> tuple[int, str]:
    """calculateScaleUpLimitWithScalingRules, and the policy that set the limit (for the reason)."""
    if rules.select_policy == PolicySelect.DISABLED:
        return current, "scale-up disabled"
    pick = min if rules.select_policy == PolicySelect.MIN else max
    best: tuple[int, str] | None = None
    for policy in rules.policies:
        start = period_start_replicas(current, history, policy.period_s, t)
        if policy.type == RatePolicyType.PODS:
            proposed = start + policy.value
        else:
            proposed = math.ceil(start * (1 + policy.value / 100))
        if best is None or pick(best[0], proposed) != best[0]:
            best = (proposed, f"scale-up policy {policy.words(True)}")
    return best if best is not None else (current, "no scale-up policy")


def scale_down_limit(current: int, history: History, rules: ScalingRules, t: float) -> tuple[int, str]:
    """calculateScaleDownLimitWithBehaviors (Percent truncates: int(start × (1 − v/100)))."""
    if rules.select_policy == PolicySelect.DISABLED:
        return current, "scale-down disabled"
    # For scaling down the most change is the lowest count, so Max picks min and Min picks max.
    pick = max if rules.select_policy == PolicySelect.MIN else min
    best: tuple[int, str] | None = None
    for policy in rules.policies:
        start = period_start_replicas(current, history, policy.period_s, t)
        percent = int(start * (1 - policy.value / 100))  # truncated, as the HPA's int32() does
        proposed = start - policy.value if policy.type == RatePolicyType.PODS else percent
        if best is None or pick(best[0], proposed) != best[0]:
            best = (proposed, f"scale-down policy {policy.words(False)}")
    return best if best is not None else (current, "no scale-down policy")


def rate_limit(policy: PoolPolicy, history: History, t: float, current: int, desired: int,
               low: int) -> tuple[int, str, str]:
    """convertDesiredReplicasWithBehaviorRate: (replicas, rule, words). `low` is the floor (min replicas)."""
    if desired > current:
        limit, words = scale_up_limit(current, history, policy.scale_up, t)
        limit = max(limit, current)  # no further scale-up until old events leave the period
        if policy.max_replicas > limit:
            allowed, rule = limit, (ScalingRule.DISABLED if policy.scale_up.select_policy == PolicySelect.DISABLED
                                    else ScalingRule.SCALE_UP_LIMIT)
        else:
            allowed, rule, words = policy.max_replicas, ScalingRule.TOO_MANY_REPLICAS, f"max {policy.max_replicas}"
        if desired > allowed:
            return allowed, rule, words
    elif desired < current:
        limit, words = scale_down_limit(current, history, policy.scale_down, t)
        limit = min(limit, current)
        if low < limit:
            allowed, rule = limit, (ScalingRule.DISABLED if policy.scale_down.select_policy == PolicySelect.DISABLED
                                    else ScalingRule.SCALE_DOWN_LIMIT)
        else:
            allowed, rule, words = low, ScalingRule.TOO_FEW_REPLICAS, f"min {low}"
        if desired < allowed:
            return allowed, rule, words
    return desired, "", ""


def record_scale(history: History, t: float, current: int, desired: int, longest_period_s: int) -> History:
    """storeScaleEvent: a change made at `t` counts against later periods; events past every period go."""
    cutoff = t - longest_period_s
    ups = tuple(e for e in history.scale_up_events if e[0] > cutoff)
    downs = tuple(e for e in history.scale_down_events if e[0] > cutoff)
    if desired > current:
        ups += ((t, desired - current),)
    elif desired < current:
        downs += ((t, current - desired),)
    return replace(history, scale_up_events=ups, scale_down_events=downs)


def normalize(policy: PoolPolicy, history: History, t: float, current: int,
              raw: int) -> tuple[int, int, History, str, str]:
    """normalizeDesiredReplicasWithBehaviors: stabilize, then rate-limit and clamp (the metric path's floor is
    1). Returns (stabilized, limited, history with this recommendation, limiting rule, words)."""
    stabilized, hist = stabilize(policy.scale_up, policy.scale_down, history, t, current, raw)
    limited, rule, words = rate_limit(policy, hist, t, current, stabilized, max(policy.min_replicas, 1))
    return stabilized, limited, hist, rule, words


def external_replicas(total: float, target: float, current: int, tolerance: float) -> int:
    """GetExternalPerPodMetricReplicas (an External metric with an AverageValue target, as KEDA's
    ScaledObject gives the HPA): ratio = total / (target × current); within tolerance keep `current`, else
    ceil(total / target)."""
    if current and abs(1.0 - total / (target * current)) <= tolerance:
        return current
    return math.ceil(total / target)


SIGNAL_RULES = {"queue_time_p95_s": ScalingRule.QUEUE_TIME, "prefill_backlog_s": ScalingRule.PREFILL_BACKLOG,
                "prefill_utilisation": ScalingRule.PREFILL_LOAD, "forecast_prompt_tps": ScalingRule.FORECAST,
                "decode_running": ScalingRule.DECODE_PRESSURE, "kv_cache_usage": ScalingRule.DECODE_PRESSURE}


# --- the decision -----------------------------------------------------------------------------------------

def _bounds_or_idle(policy: PoolPolicy, obs: Observation, history: History) -> Evaluation | None:
    """The decisions made without metrics (None: none applies): a count outside the bounds goes straight to the
    bound (reconcileAutoscaler), zero replicas stay or activate, and an idle serverless pool scales to zero.

    Scale to zero: idle for the window, unless the measured cold start is longer than the idle gap so far (an idle
    period that has lasted T is expected to last about T more; a longer cold start costs more latency than the GPU
    time it saves)."""
    current = obs.replicas

    def done(raw, limited, rule, reason):
        return Evaluation(obs.t, current, raw, limited, limited, limited, rule, reason, (), history,
                          limited == current and raw != current)

    if current > policy.max_replicas:
        n = policy.max_replicas
        return done(n, n, ScalingRule.TOO_MANY_REPLICAS, f"{replica_count(current)} above max {n} → {n}")
    if current == 0:
        if policy.min_replicas > 0:
            n = policy.min_replicas
            return done(n, n, ScalingRule.TOO_FEW_REPLICAS, f"0 replicas below min {n} → {n}")
        if obs.pending_activation > 0:
            return done(1, 1, ScalingRule.ACTIVATION,
                        f"{obs.pending_activation} request(s) held at zero replicas → 1 replica")
        return done(0, 0, ScalingRule.IDLE_TO_ZERO, "scaled to zero; no request waiting for activation")
    if current < policy.min_replicas:
        n = policy.min_replicas
        return done(n, n, ScalingRule.TOO_FEW_REPLICAS, f"{replica_count(current)} below min {n} → {n}")
    if policy.min_replicas == 0 and policy.scale_to_zero_after_s and obs.idle_for_s is not None \
            and obs.idle_for_s >= policy.scale_to_zero_after_s:
        if obs.cold_start_s is not None and obs.cold_start_s > obs.idle_for_s:
            return done(0, current, ScalingRule.COLD_START,
                        f"idle {obs.idle_for_s:.0f} s, but the last cold start took {obs.cold_start_s:.0f} s: "
                        f"kept {current}")
        cold = f"; last cold start {obs.cold_start_s:.0f} s" if obs.cold_start_s is not None else ""
        return done(0, 0, ScalingRule.IDLE_TO_ZERO,
                    f"no arrivals, running or waiting requests for {obs.idle_for_s:.0f} s → 0 replicas{cold}")
    return None


@dataclass
class _Ask:
    """The recommendation being built: replicas, the rule that set them, why, and the metrics behind them."""

    raw: int
    rule: str
    why: str
    words: str
    results: list
    drained: bool = False


def _metric_ask(policy: PoolPolicy, obs: Observation, sig) -> _Ask:
    """The HPA's recommendation from the pool's metrics (the max over them; a missing metric blocks a
    scale-down). Queue measures ask for no replica while the current replicas drain the queue first."""
    current = obs.replicas
    results = [metric_replicas(m.name, m.target, current, obs.pods, policy.tolerance) for m in policy.metrics]
    drained = bool(sig.drains) and any(r.name in QUEUED and (r.replicas or 0) > current for r in results)
    if drained:  # work already waiting that the current replicas finish before a new one could start
        results = [replace(r, replicas=min(r.replicas, current)) if r.name in QUEUED and r.replicas else r
                   for r in results]
    valid = [r for r in results if r.replicas is not None]
    words = "; ".join(metric_words(r) for r in results)
    if not valid:
        return _Ask(current, ScalingRule.NO_METRICS, words or "no metrics configured", words, results, drained)
    top = max(valid, key=lambda r: r.replicas)
    raw = top.replicas
    if raw > current:
        rule, why = ScalingRule.METRIC, metric_words(top)
    elif raw < current:
        rule, why = ScalingRule.METRIC, "all metrics below target: " + words
    elif all(abs(1.0 - r.ratio) <= policy.tolerance for r in valid):
        rule, why = ScalingRule.TOLERANCE, "within tolerance: " + words
    else:
        # The HPA's missing-pod rule: pods without the metric counted as 0 (up) or the target (down) bring the
        # ratio within tolerance or reverse its direction, so the count stays.
        rule, why = ScalingRule.METRIC, "no change once pods without metrics are counted: " + words
    if len(valid) < len(results) and raw < current:
        # A metric failed and the others point down: do not scale (the HPA's rule).
        raw, rule, why = current, ScalingRule.NO_METRICS, "a metric is missing, so no scale-down: " + words
    return _Ask(raw, rule, why, words, results, drained)


def _signal_ask(ask: _Ask, obs: Observation, sig, any_valid: bool) -> None:
    """The signals' replicas raise the metrics' ask (or stand alone without metrics); their words join it."""
    top = sig.top
    if top is None:
        return
    ask.results += [MetricResult(s.name, s.value, s.target, s.value / s.target if s.target else None, s.replicas)
                    for s in sig.signals]
    if any_valid and top.replicas <= ask.raw and not (ask.raw < obs.replicas and ask.rule != ScalingRule.NO_METRICS):
        return
    top_words = "; ".join(s.words for s in sig.signals)
    if not any_valid or top.replicas > ask.raw:
        ask.raw, ask.rule = top.replicas, SIGNAL_RULES[top.name]
        ask.why = top.words if top.replicas > obs.replicas else f"signals: {top_words}"
    ask.words = f"{ask.words}; {top_words}" if ask.words else top_words


def _guard_ask(ask: _Ask, policy: PoolPolicy, obs: Observation, sig) -> None:
    """The SLO guard raises the ask or holds it from a scale-down; a TTFT at the prompts' own prefill time, or a
    queue the replicas drain before a new one could serve, says why no replica comes."""
    guard_up, guard_floor, guard_words = slo_guard(policy, obs, sig.drains)
    floor_words = prefill_floor_words(policy, obs)
    if guard_up is not None and guard_up > ask.raw:
        ask.raw, ask.rule = guard_up, ScalingRule.SLO_GUARD
        ask.why = f"{guard_words}; {ask.words}" if ask.words else guard_words
    elif guard_floor is not None and ask.raw < guard_floor:
        ask.raw, ask.rule, ask.why = guard_floor, ScalingRule.SLO_GUARD, guard_words
    elif floor_words and ask.raw == obs.replicas:
        ask.rule, ask.why = ScalingRule.PREFILL_FLOOR, f"{floor_words}; holding at {obs.replicas}; {ask.why}"
    if ask.drained and ask.raw <= obs.replicas and ask.rule not in (ScalingRule.SLO_GUARD, ScalingRule.PREFILL_FLOOR):
        ask.rule, ask.why = ScalingRule.PREFILL_BACKLOG, f"{sig.drains}, so the queue asks for no replica: {ask.words}"


def _settle(policy: PoolPolicy, obs: Observation, history: History, ask: _Ask, sig) -> Evaluation:
    """Stabilize and rate-limit the ask (with the short scale-down window once a burst is over), and say how."""
    current, raw, rule, why = obs.replicas, ask.raw, ask.rule, ask.why
    steer = policy
    if sig.decay and raw < current:
        window = min(policy.scale_down.stabilization_window_s, DECAY_WINDOW_S)
        steer = replace(policy, scale_down=replace(policy.scale_down, stabilization_window_s=window))
        why = f"{why}; {sig.decay_words}"
    stabilized, limited, hist, limit_rule, limit_words = normalize(steer, history, obs.t, current, raw)
    if stabilized != raw:
        direction = ScalingRule.SCALE_UP_STABILIZED if raw >= current else ScalingRule.SCALE_DOWN_STABILIZED
        window = (steer.scale_up if raw >= current else steer.scale_down).stabilization_window_s
        pick = "lowest" if raw >= current else "highest"
        rule, why = direction, f"{why} → {raw}; held at {stabilized} ({pick} recommendation of the last {window} s)"
    if limited != stabilized:
        rule, why = limit_rule, f"{why} → {replica_count(stabilized)}; limited by {limit_words} → {limited}"
    elif limited != current and stabilized == raw:
        why = f"{why} → {replica_count(limited)}"
    if sig.decay and limited < current and limited == stabilized:
        rule = ScalingRule.SPIKE_DECAY  # the short window let this scale-down through
    held = limited == current and min(max(raw, max(policy.min_replicas, 1)), policy.max_replicas) != current
    # A TTFT over its target that the floor rule holds, or a queue drained before a replica could come, is kept
    # like a held change: it says why no replica came.
    held = held or (limited == current and (rule == ScalingRule.PREFILL_FLOOR or ask.drained))
    return Evaluation(obs.t, current, raw, stabilized, limited, limited, rule, why, tuple(ask.results), hist, held,
                      sig.forecast)


def _evaluate_once(policy: PoolPolicy, obs: Observation, history: History, sig: Outcome,
                   floor: bool = False) -> Evaluation | None:
    """One evaluation by one set of rules: the bounds and idle rules, else the metrics' ask raised by the signals
    (`sig`) and the SLO guard, stabilized and rate-limited. `floor`: None where neither a metric nor the guard
    asks anything (the reactive rules have nothing to go on, so they set no floor)."""
    decided = _bounds_or_idle(policy, obs, history)
    if decided is not None:
        return decided
    history = replace(history, forecast=sig.forecast_state)
    ask = _metric_ask(policy, obs, sig)
    _signal_ask(ask, obs, sig, any(r.replicas is not None for r in ask.results))
    _guard_ask(ask, policy, obs, sig)
    if floor and ask.rule == ScalingRule.NO_METRICS:
        return None
    return _settle(policy, obs, history, ask, sig)


def reactive(obs: Observation) -> Observation:
    """What the reactive rules see of an observation: no replica rates, so none of the signals, and TTFT as an
    absolute p95, as they judged it before the signals (replicas added for long prompts take prefills off the
    decodes, which ITL needs). ITL stays with the decode-pressure signal above the floor, since a token time's p95
    alone does not say what a replica more does to it."""
    return replace(obs, rates=None, ttft_floor_p95_s=None, itl_p95_s=None, queue_time_p95_s=None,
                   waiting_prompt_tokens=None, prompt_tokens_per_s=None, arrivals_per_s=None)


def _with_floor(policy: PoolPolicy, obs: Observation, history: History, ev: Evaluation) -> Evaluation:
    """The pool never gets fewer replicas than the reactive rules alone would give it (the floor: the same policy on
    `reactive(obs)`, with its own stabilization memory and the pool's scale events, and without the spike decay,
    which the reactive rules never had: a burst called over early let the pool down where they kept it); the
    signals' economical ask decides above it. Its raw recommendation is the higher ask."""
    floor_sig = Outcome(forecast_state=history.forecast)
    floor = _evaluate_once(policy, reactive(obs), replace(history, recommendations=history.floor_recommendations),
                           floor_sig, floor=True)
    if floor is None:
        return ev
    ask = max(ev.raw, floor.raw)
    if floor.desired > ev.desired:
        return replace(ev, raw=ask, stabilized=max(ev.stabilized, floor.stabilized), limited=floor.limited,
                       desired=floor.desired, rule=ScalingRule.REACTIVE_FLOOR,
                       reason=f"{floor.reason}; the reactive rules' ask is the floor (the signals ask "
                              f"{replica_count(ev.desired)}: {ev.reason})",
                       held=floor.limited == ev.current and floor.held,
                       history=replace(ev.history, floor_recommendations=floor.history.recommendations))
    return replace(ev, raw=ask, history=replace(ev.history, floor_recommendations=floor.history.recommendations))


def evaluate(policy: PoolPolicy, obs: Observation, history: History) -> Evaluation:
    """One evaluation of one pool, as the HPA's reconcileAutoscaler with behaviors does it, plus the SLO guard,
    scale to zero (serverless, min 0) and activation. With the replica's rates (the signals) the reactive rules'
    decision is its floor (`_with_floor`): saving GPU-hours never costs attainment the reactive rules would keep.
    Where the ask passes the pool's maximum, the pool goes to the maximum and the decision says that it binds."""
    decided = _bounds_or_idle(policy, obs, history)
    if decided is not None:
        return decided
    sig = evaluate_signals(policy, obs, history.forecast, obs.period_s)
    ev = _evaluate_once(policy, obs, history, sig)
    if obs.rates is not None:
        ev = _with_floor(policy, obs, history, ev)
    if ev.desired == policy.max_replicas and ev.raw > policy.max_replicas:
        ev = replace(ev, binds=True, reason=f"{ev.reason}; the maximum binds: the rules ask {replica_count(ev.raw)} "
                                            f"for the SLO, the pool's maximum is {policy.max_replicas}")
    return ev
