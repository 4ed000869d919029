"""The reactive floor under the signals (`apps.autoscaling.rules.evaluate`), worked out by hand: a queue that comes
in bursts, which the current replicas drain between them, still scales the pool; and on bursty coding traffic the
built-in autoscaler keeps at least the attainment of the previous policy (`builtin_reactive`)."""

from __future__ import annotations

import random

from apps.autoscaling.rules import History, Observation, PodSample, evaluate, record_scale
from apps.serving.scaling_policy import MetricTarget, PoolPolicy
from capacity.roofline import ReplicaRates

RATES = ReplicaRates(prefill_tokens_per_s=4000.0, decode_base_s=0.05, decode_per_seq_s=0.001)
W = "waiting_requests_per_replica"


def observe(t: float, replicas: int, waiting: float, tokens: float) -> Observation:
    pods = tuple(PodSample(True, {W: waiting}) for _ in range(replicas))
    return Observation(t=t, replicas=replicas, pods=pods, rates=RATES, waiting_prompt_tokens=tokens,
                       prompt_tokens_per_s=1000.0, arrivals_per_s=4.0 if waiting else 0.0, cold_start_s=28.0,
                       queue_time_p95_s=None)


def test_a_bursty_queue_that_the_replicas_drain_between_bursts_still_scales_the_pool():
    # Every other 15 s a burst leaves 12 requests waiting per replica (20,000 prompt tokens), then nothing waits.
    # The replicas' spare prefill rate, (n × 4,000 − 1,000) tokens/s over a 28 s cold start, drains 20,000 tokens
    # before a new replica could serve, so the signals ask for no replica for the queue, and 1,000 prompt
    # tokens/s ask for ceil(1,000 / 1,600) = 1. The reactive rules are the floor:
    # t=0, 2 replicas: 12 waiting against 4 ask ceil(2 × 3) = 6; the scale-up policy allows max(2 × 2, 2 + 4) = 6.
    # t=15, 6 replicas, nothing waits: the ask is 0, but the scale-down window (300 s) keeps the highest
    #   recommendation of its memory, 6.
    # t=30, 6 replicas: ceil(6 × 3) = 18; the +4 made at t=0 has left the 15 s period, so the policy allows
    #   max(6 × 2, 6 + 4) = 12.
    # t=45: held at 12 (the window); t=60: ceil(12 × 3) = 36, allowed max(24, 16) = 24, the maximum 20 binds.
    policy = PoolPolicy(min_replicas=1, max_replicas=20, metrics=(MetricTarget(W, 4),), ttft_p95_s=2.0)
    history, replicas, seen = History(), 2, []
    for i in range(5):
        burst = i % 2 == 0
        ev = evaluate(policy, observe(15.0 * i, replicas, 12.0 if burst else 0.0, 20000.0 if burst else 0.0),
                      history)
        history = record_scale(ev.history, ev.t, replicas, ev.desired, policy.longest_period_s)
        seen.append((ev.desired, ev.rule))
        replicas = ev.desired
    assert [d for d, _ in seen] == [6, 6, 12, 12, 20]
    assert seen[0][1] == seen[2][1] == "reactive_floor"
    assert "the maximum binds: the rules ask 36 replicas for the SLO, the pool's maximum is 20" in ev.reason
    # The signals alone said 2, then (their own scale-down window holding their highest) no more than the pool had.
    assert "the reactive rules' ask is the floor (the signals ask 2 replicas: the 2 ready replica(s) drain the 20000" in \
        evaluate(policy, observe(0.0, 2, 12.0, 20000.0), History()).reason


def test_without_the_replicas_rates_the_rules_are_the_reactive_ones_and_keep_no_floor_memory():
    # No rates: no signals, so no floor either; 12 waiting at 2 replicas → 6, and no floor recommendations kept.
    policy = PoolPolicy(min_replicas=1, max_replicas=20, metrics=(MetricTarget(W, 4),))
    pods = tuple(PodSample(True, {W: 12.0}) for _ in range(2))
    ev = evaluate(policy, Observation(t=0.0, replicas=2, pods=pods), History())
    assert (ev.desired, ev.rule, ev.history.floor_recommendations) == (6, "metric", ())


def test_the_floor_memory_survives_the_stored_history():
    history = History(recommendations=((0.0, 2),), floor_recommendations=((0.0, 6), (15.0, 0)))
    assert History.from_dict(history.as_dict()) == history
    assert History.from_dict({"recommendations": [[0, 2]]}).floor_recommendations == ()


def test_builtin_keeps_the_previous_policys_attainment_on_coding_traffic_in_bursts_of_seconds():
    # Half an hour of the benchmark's coding trace (bursts of seconds): the built-in autoscaler with its signals
    # against the previous policy (the reactive rules alone), on the same requests. Before the floor, builtin met
    # the ITL of 89.6 % of the requests where the previous policy met 93.0 %.
    from apps.whatif.policies import Builtin, spec_rates
    from bench import autoscale as bench

    rng = random.Random(1)
    arrivals = bench.trace("coding", 0.5, rng)
    lengths = bench.lengths_for("coding", len(arrivals), rng)
    kept = [i for i, (p, o) in enumerate(lengths) if p + o <= bench.MAX_MODEL_LEN]
    arrivals, lengths = [arrivals[i] for i in kept], [lengths[i] for i in kept]
    spec = bench.engine_spec()
    builtin = bench.simulate(Builtin(bench.builtin_policy(bench.BUILTIN_ITL_SPEC), rates=spec_rates(spec)),
                             arrivals, lengths, spec, 0.5, 0, "builtin")
    previous = bench.simulate(Builtin(bench.builtin_policy()), arrivals, lengths, spec, 0.5, 0, "builtin_reactive")
    assert builtin["slo_attainment"] >= previous["slo_attainment"]
    assert builtin["itl_slo_attainment"] >= previous["itl_slo_attainment"]
