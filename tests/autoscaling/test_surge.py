"""Worked by hand: a queue the replicas drain before a new one could start asks the signals for none (the reactive
floor still scales), a backlog waits for the replicas already starting while no cold start is measured, and a step
in the load between evaluations scales up at once at the panic rate, unless the pool's arrivals come in bursts
(`apps.autoscaling.surge`)."""

from __future__ import annotations

from apps.autoscaling.rules import History, Observation, PodSample, evaluate
from apps.autoscaling.surge import surge
from apps.serving.scaling_policy import MetricTarget, PoolPolicy
from capacity.roofline import ReplicaRates

RATES = ReplicaRates(prefill_tokens_per_s=4000.0, decode_base_s=0.05, decode_per_seq_s=0.001)
W = "waiting_requests_per_replica"


def policy(**kw) -> PoolPolicy:
    return PoolPolicy(**({"min_replicas": 1, "max_replicas": 20, "metrics": (MetricTarget(W, 4),),
                          "ttft_p95_s": 2.0} | kw))


def obs(replicas=2, waiting=0.0, ready=True, **kw) -> Observation:
    pods = tuple(PodSample(ready, {W: waiting} if ready else {}) for _ in range(replicas))
    return Observation(**({"t": 0.0, "replicas": replicas, "pods": pods, "rates": RATES} | kw))


def test_a_queue_the_replicas_drain_first_asks_the_signals_for_none_but_the_reactive_floor_still_scales():
    # 2 ready replicas of 4,000 prompt tokens/s with 1,000/s arriving have 7,000/s to spare: in the 28 s a new
    # replica takes to start they prefill 196,000 tokens, so 20,000 waiting are gone before it serves. The signals'
    # rules ask for no replica for the waiting requests and the TTFT p95, and say why. The reactive rules are the
    # floor: 30 waiting per replica against 4 ask for ceil(2 × 30 / 4) = 15, the TTFT 9 s above its floor against
    # 2 s (×4.5) for max(2 + 1, ceil(2 × 2)) = 4, so 15, and the scale-up policy allows max(2 × 2, 2 + 4) = 6.
    drained = obs(waiting=30, waiting_prompt_tokens=20000, prompt_tokens_per_s=1000, cold_start_s=28,
                  ttft_p95_s=10.0, ttft_floor_p95_s=1.0)
    ev = evaluate(policy(), drained, History())
    assert (ev.raw, ev.desired, ev.rule, ev.held) == (15, 6, "reactive_floor", False)
    assert ev.reason.startswith("waiting 30.0 per replica > target 4 (×7.50) → 15 replicas; limited by scale-up "
                                "policy +4 pods / 15 s → 6; ")
    assert ("the reactive rules' ask is the floor (the signals ask 2 replicas: the 2 ready replica(s) drain the 20000 "
            "prompt tokens waiting before a replica asked now would serve (28 s cold start), so the queue asks for "
            "no replica: waiting 30") in ev.reason
    # The floor keeps its own recommendations (15, at t = 0) beside the pool's (the signals' 2).
    assert (ev.history.floor_recommendations, ev.history.recommendations) == (((0.0, 15),), ((0.0, 2),))
    # 400,000 waiting: 204,000 are left when a new replica serves, ceil(204,000 / (4,000 × 1 s)) = 51 replicas;
    # the default scale-up allows max(2 × 2, 2 + 4) = 6.
    ev = evaluate(policy(), obs(waiting=30, waiting_prompt_tokens=400000, prompt_tokens_per_s=1000, cold_start_s=28),
                  History())
    assert (ev.desired, ev.rule) == (6, "ScaleUpLimit")


def test_before_a_cold_start_is_measured_the_backlog_waits_for_the_replicas_starting():
    # The first replica is still starting and 30,000 tokens wait for it: ceil(30,000 / 4,000) = 8 replicas would
    # drain them within 1 s, but any asked now would come up after it, and how long that takes is not known yet.
    ev = evaluate(policy(metrics=()), obs(replicas=1, ready=False, waiting_prompt_tokens=30000), History())
    assert ev.desired == 1
    assert "waiting for the 1 replica(s) starting (no cold start measured yet" in ev.reason
    # Once a cold start is measured (28 s), a replica still starting is not counted on to drain the backlog: it
    # serves for an unknown part of those 28 s. All 200,000 waiting are left for replicas asked now:
    # ceil(200,000 / 4,000) = 50, and the scale-up policy allows max(1 × 2, 1 + 4) = 5.
    ev = evaluate(policy(metrics=()), obs(replicas=1, ready=False, waiting_prompt_tokens=200000, cold_start_s=28),
                  History())
    assert (ev.raw, ev.desired) == (50, 5)
    # Ready, it prefills 112,000 tokens in that time: 88,000 are left, ceil(88,000 / 4,000) = 22.
    ev = evaluate(policy(metrics=()), obs(replicas=1, waiting_prompt_tokens=200000, cold_start_s=28), History())
    assert (ev.raw, ev.desired) == (22, 5)


def steady_history(counts) -> History:
    """Ten periodic evaluations at 3 replicas: 1,000 prompt tokens/s, `counts[i]` arrivals in each 15 s."""
    history = History()
    for i, count in enumerate(counts):
        ev = evaluate(policy(metrics=(), min_replicas=3), obs(replicas=3, t=15.0 * i, prompt_tokens_per_s=1000,
                                              arrivals_per_s=count / 15, waiting_prompt_tokens=0, cold_start_s=28),
                      history)
        assert ev.desired == 3  # 1,000 / (0.4 × 4,000) → 1, kept at the minimum of 3
        history = ev.history
    return history


def test_a_step_between_evaluations_scales_up_at_once_at_the_panic_rate():
    # Arrivals came smoothly (22 ± 2 per 15 s): dispersion under 3. The scrape 5 s after the last evaluation shows
    # 30,000 prompt tokens/s, 30 × the smoothed 1,000: ceil(30,000 / (0.4 × 4,000)) = 19 replicas for the load
    # (the forecast, rising, asks more). The periodic evaluation's scale-up policy would allow max(3 × 2, 3 + 4) =
    # 7; the surge's +1000 % allows 33, so the pool's maximum, 20.
    history = steady_history([22, 23, 21, 22, 24, 23, 22, 21, 23, 22])
    step = obs(replicas=3, t=140.0, prompt_tokens_per_s=30000, arrivals_per_s=20, waiting_prompt_tokens=0,
               cold_start_s=28, period_s=5.0)
    assert evaluate(policy(metrics=()), step, history).desired == 7
    ev = surge(policy(metrics=()), step, history)
    assert (ev.current, ev.desired, ev.rule) == (3, 20, "TooManyReplicas")
    assert {m.name: m.replicas for m in ev.metrics}["prefill_utilisation"] == 19
    assert ev.reason.startswith("surge between evaluations (scale-up at +1000% / 15 s): forecast ")
    assert ev.reason.endswith("limited by max 20 → 20; the maximum binds: the rules ask 22 replicas for the SLO, "
                              "the pool's maximum is 20")
    assert ev.history.forecast == history.forecast  # the forecast keeps its periodic steps
    # No step: 1,500 prompt tokens/s is under twice the smoothed load and nothing waits.
    calm = obs(replicas=3, t=140.0, prompt_tokens_per_s=1500, arrivals_per_s=2, waiting_prompt_tokens=0,
               cold_start_s=28, period_s=5.0)
    assert surge(policy(metrics=()), calm, history) is None


def test_in_a_pool_whose_arrivals_come_in_bursts_a_burst_is_no_surge():
    # 5 and 120 arrivals per 15 s in turn: successive differences of 115, 115² / 2 / 62.5 = 106 × a Poisson's
    # dispersion. A burst of seconds is over before a replica could start, so the step waits for the evaluation.
    history = steady_history([5, 120] * 5)
    step = obs(replicas=3, t=140.0, prompt_tokens_per_s=30000, arrivals_per_s=20, waiting_prompt_tokens=0,
               cold_start_s=28, period_s=5.0)
    assert surge(policy(metrics=()), step, history) is None
