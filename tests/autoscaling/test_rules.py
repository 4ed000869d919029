"""Every rule of the built-in autoscaler, worked out by hand from the Kubernetes HPA documentation and code
(kubernetes/website horizontal-pod-autoscale.md, pkg/controller/podautoscaler/{replica_calculator,horizontal}.go)
and run through the replay function, the same code the beat task runs. Pure: no database."""

from __future__ import annotations

import pytest

from apps.autoscaling.replay import replay
from apps.serving.scaling_policy import PolicyError

W = "waiting_requests_per_replica"
K = "kv_cache_usage"


def pods(*values, name=W):
    """Ready pods each reporting `value` for `name`; None is a pod that is not ready."""
    return [{"ready": False, "metrics": {}} if v is None else {"ready": True, "metrics": {name: v}} for v in values]


def policy(**kw):
    base = {"min_replicas": 1, "max_replicas": 20, "tolerance": 0.1, "metrics": [{"name": W, "target_per_replica": 4}]}
    return base | kw


def run(steps, **kw):
    return replay({"policy": policy(**kw), "steps": steps})


def no_windows(**up):
    """Behavior with no stabilization and generous rates, so one rule is looked at alone."""
    return {"scale_up": {"stabilization_window_s": 0, "select_policy": "Max",
                         "policies": [{"type": "Pods", "value": 100, "period_s": 15}], **up},
            "scale_down": {"stabilization_window_s": 0, "select_policy": "Max",
                           "policies": [{"type": "Percent", "value": 100, "period_s": 15}]}}


# --- the core rule: desired = ceil(current × value / target) ---------------------------------------------------


def test_desired_is_ceil_of_ratio_times_pods():
    # HPA docs, "Algorithm details": desiredReplicas = ceil[currentReplicas × (currentMetricValue / desiredMetricValue)].
    # 2 pods at 14.2 waiting each, target 4 → ratio 3.55 → ceil(3.55 × 2) = ceil(7.1) = 8.
    [r] = run([{"t": 0, "replicas": 2, "pods": pods(14.2, 14.2)}], behavior=no_windows())
    assert (r["raw"], r["desired"]) == (8, 8)
    assert r["metrics"][0]["ratio"] == pytest.approx(3.55)
    assert "waiting 14.2 per replica > target 4 (×3.55)" in r["reason"]


def test_within_tolerance_nothing_changes_and_the_boundary_counts_as_within():
    # Docs: "the control plane skips any scaling action if the ratio is sufficiently close to 1.0 (within a
    # globally-configurable tolerance, 0.1 by default)"; code: `math.Abs(1.0-usageRatio) <= c.tolerance`.
    # With tolerance 0.25 (exact in binary): 5 / 4 = 1.25, |1 − 1.25| = 0.25 ≤ 0.25 → keep 3.
    # 5.2 / 4 = 1.3 → ceil(1.3 × 3) = ceil(3.9) = 4.
    [at_edge] = run([{"t": 0, "replicas": 3, "pods": pods(5, 5, 5)}], tolerance=0.25, behavior=no_windows())
    [beyond] = run([{"t": 0, "replicas": 3, "pods": pods(5.2, 5.2, 5.2)}], tolerance=0.25, behavior=no_windows())
    assert (at_edge["desired"], at_edge["rule"]) == (3, "tolerance")
    assert beyond["desired"] == 4


def test_missing_pods_count_as_zero_on_a_scale_up():
    # Docs: "if the initial ratio was > 1 (scale up), pods missing metrics are assumed to use 0% of the target".
    # 4 replicas, 2 ready at 12 each, 2 not ready. Ratio over the two = 12/4 = 3 (up). Refilled: (12+12+0+0)/4 = 6 →
    # ratio 1.5 → ceil(1.5 × 4) = 6 (not ceil(3 × 2) = 6 by chance: with one ready pod at 12 and three missing,
    # (12+0+0+0)/4 = 3 → ratio 0.75 reverses the direction → keep 4).
    [two] = run([{"t": 0, "replicas": 4, "pods": pods(12, 12, None, None)}], behavior=no_windows())
    [one] = run([{"t": 0, "replicas": 4, "pods": pods(12, None, None, None)}], behavior=no_windows())
    assert two["desired"] == 6
    assert one["desired"] == 4 and one["metrics"][0]["missing"] == 3


def test_missing_pods_count_as_the_target_on_a_scale_down():
    # Docs: "if the initial ratio was < 1 (scale down), pods missing metrics are assumed to be at 100% of the
    # target". 4 replicas: two at 1, two missing. Ratio 1/4 = 0.25 (down). Refilled: (1+1+4+4)/4 = 2.5 → ratio
    # 0.625 → ceil(0.625 × 4) = ceil(2.5) = 3.
    [r] = run([{"t": 0, "replicas": 4, "pods": pods(1, 1, None, None)}], behavior=no_windows())
    assert r["desired"] == 3


def test_a_pod_without_the_metric_is_missing_even_when_ready():
    # The replay format: "A pod that is not ready, or lacks a metric, counts as missing for that metric".
    steps = [{"t": 0, "replicas": 2, "pods": [{"ready": True, "metrics": {W: 1}}, {"ready": True, "metrics": {}}]}]
    [r] = run(steps, behavior=no_windows())
    # Down (0.25): the missing pod counts as 4 → (1+4)/2 = 2.5 → 0.625 → ceil(1.25) = 2 → no change.
    assert r["desired"] == 2 and r["metrics"][0]["missing"] == 1


def test_several_metrics_the_highest_recommendation_wins():
    # Docs, "Algorithm details": with several metrics the HPA computes each and chooses the largest.
    # waiting 2/4 = 0.5 → ceil(0.5 × 2) = 1; KV 0.9/0.6 = 1.5 → ceil(1.5 × 2) = 3. → 3.
    p = [{"ready": True, "metrics": {W: 2, K: 0.9}}, {"ready": True, "metrics": {W: 2, K: 0.9}}]
    metrics = [{"name": W, "target_per_replica": 4}, {"name": K, "target_per_replica": 0.6}]
    [r] = run([{"t": 0, "replicas": 2, "pods": p}], metrics=metrics, behavior=no_windows())
    assert r["desired"] == 3
    assert [m["replicas"] for m in r["metrics"]] == [1, 3]


def test_a_failed_metric_blocks_a_scale_down_but_not_a_scale_up():
    # Docs: "If any of these metrics cannot be converted into a desired replica count ... and the metrics that
    # were fetched suggest a scale down, scaling is skipped"; a scale-up still happens.
    down = [{"ready": True, "metrics": {W: 1}}, {"ready": True, "metrics": {W: 1}}]
    metrics = [{"name": W, "target_per_replica": 4}, {"name": K, "target_per_replica": 0.8}]
    [r] = run([{"t": 0, "replicas": 2, "pods": down}], metrics=metrics, behavior=no_windows())
    assert (r["desired"], r["rule"]) == (2, "no_metrics")
    up = [{"ready": True, "metrics": {W: 12}}, {"ready": True, "metrics": {W: 12}}]
    [r] = run([{"t": 0, "replicas": 2, "pods": up}], metrics=metrics, behavior=no_windows())
    assert r["desired"] == 6  # ceil(3 × 2)


# --- stabilization windows ------------------------------------------------------------------------------------


def test_scale_down_uses_the_highest_recommendation_in_the_window():
    # Docs, "Stabilization window": "the highest recommendation within the window is used" on scale-down
    # (default 300 s). t=0: 3 pods at 8 → ratio 2 → 6 (scaled, rate allows +100 pods). t=60: 6 pods at 1 →
    # raw ceil(0.25 × 6) = 2, but 6 was recommended 60 s ago → held at 6. t=301: the 6 from t=0 is out of the
    # window; the 2 from t=60 is in → 2.
    behavior = no_windows()
    behavior["scale_down"]["stabilization_window_s"] = 300
    steps = [{"t": 0, "replicas": 3, "pods": pods(8, 8, 8)},
             {"t": 60, "replicas": 6, "pods": pods(*[1] * 6)},
             {"t": 301, "replicas": 6, "pods": pods(*[1] * 6)}]
    first, second, third = run(steps, behavior=behavior)
    assert first["desired"] == 6
    assert (second["raw"], second["desired"], second["rule"], second["held"]) == (2, 6, "ScaleDownStabilized", True)
    assert third["desired"] == 2


def test_scale_up_uses_the_lowest_recommendation_in_the_window():
    # horizontal.go stabilizeRecommendationWithBehaviors: upRecommendation = min(recommendations newer than the
    # scale-up window, this one); the result is clamp(current, up, down). Window 60 s. t=0: 2 pods at 8 → raw
    # ceil(2 × 2) = 4, nothing older in the window → 4. t=30: raw ceil(3 × 4) = 12, but the 4 from t=0 is in the
    # window → min(12, 4) = 4 → held at 4.
    behavior = no_windows(stabilization_window_s=60)
    steps = [{"t": 0, "replicas": 2, "pods": pods(8, 8)}, {"t": 30, "replicas": 4, "pods": pods(12, 12, 12, 12)}]
    first, second = run(steps, behavior=behavior)
    assert first["desired"] == 4
    assert (second["raw"], second["desired"], second["rule"]) == (12, 4, "ScaleUpStabilized")


# --- rate policies ----------------------------------------------------------------------------------------------


def test_default_scale_up_is_the_larger_of_double_and_plus_four_per_15s():
    # Default behavior (docs): scaleUp Percent 100 per 15 s and Pods 4 per 15 s, selectPolicy Max.
    # From 2: Percent → ceil(2 × 2) = 4; Pods → 2 + 4 = 6; Max → 6. Raw ceil(3.55 × 2) = 8 → 6.
    [r] = run([{"t": 0, "replicas": 2, "pods": pods(14.2, 14.2)}])
    assert (r["raw"], r["desired"], r["rule"]) == (8, 6, "ScaleUpLimit")
    assert "limited by scale-up policy +4 pods / 15 s" in r["reason"]
    # From 10: Percent → 20, Pods → 14; Max → 20. Raw ceil(3 × 10) = 30 → 20 (the Percent policy).
    [r] = run([{"t": 0, "replicas": 10, "pods": pods(*[12] * 10)}], max_replicas=50)
    assert (r["desired"], r["reason"].endswith("limited by scale-up policy +100% / 15 s → 20")) == (20, True)


def test_select_policy_min_takes_the_smallest_change():
    # selectPolicy Min: "the policy which allows the smallest change". From 2: Percent 100 → 4, Pods 4 → 6 → 4.
    behavior = {"scale_up": {"stabilization_window_s": 0, "select_policy": "Min",
                             "policies": [{"type": "Percent", "value": 100, "period_s": 15},
                                          {"type": "Pods", "value": 4, "period_s": 15}]}}
    [r] = run([{"t": 0, "replicas": 2, "pods": pods(14.2, 14.2)}], behavior=behavior)
    assert r["desired"] == 4


def test_select_policy_disabled_turns_scaling_in_that_direction_off():
    # selectPolicy Disabled: "turns off scaling the given direction"; code returns currentReplicas as the limit.
    behavior = {"scale_up": {"stabilization_window_s": 0, "select_policy": "Disabled", "policies": []}}
    [r] = run([{"t": 0, "replicas": 2, "pods": pods(14.2, 14.2)}], behavior=behavior)
    assert (r["raw"], r["desired"], r["rule"], r["held"]) == (8, 2, "disabled", True)


def test_changes_made_in_the_period_count_against_the_policy():
    # horizontal.go: periodStartReplicas = current − added in period + removed in period; Pods policy allows
    # periodStart + value. Pods 2 per 60 s. t=0: 2 → 4 (raw 8). t=30: current 4, added 2 in the last 60 s →
    # periodStart 2 → limit 4 → stays 4 (no further scale-up until the event leaves the period). t=61: the event
    # at t=0 is out of the period → periodStart 4 → 6.
    behavior = no_windows(policies=[{"type": "Pods", "value": 2, "period_s": 60}])
    steps = [{"t": 0, "replicas": 2, "pods": pods(16, 16)},
             {"t": 30, "replicas": 4, "pods": pods(16, 16, 16, 16)},
             {"t": 61, "replicas": 4, "pods": pods(16, 16, 16, 16)}]
    first, second, third = run(steps, behavior=behavior)
    assert [first["desired"], second["desired"], third["desired"]] == [4, 4, 6]
    assert second["rule"] == "ScaleUpLimit"


def test_percent_scale_down_truncates():
    # calculateScaleDownLimitWithBehaviors: Percent → int32(periodStart × (1 − value/100)), truncated.
    # 5 replicas, Percent 50 per 15 s → int(2.5) = 2; raw ceil(0.1 × 5) = 1 → limited to 2.
    behavior = {"scale_down": {"stabilization_window_s": 0, "select_policy": "Max",
                               "policies": [{"type": "Percent", "value": 50, "period_s": 15}]}}
    [r] = run([{"t": 0, "replicas": 5, "pods": pods(*[0.4] * 5)}], behavior=behavior)
    assert (r["raw"], r["desired"], r["rule"]) == (1, 2, "ScaleDownLimit")


# --- clamp --------------------------------------------------------------------------------------------------------


def test_the_result_is_clamped_to_min_and_max():
    # convertDesiredReplicasWithBehaviorRate: the limits are then bounded by maxReplicas / minReplicas
    # (reasons TooManyReplicas / TooFewReplicas).
    [up] = run([{"t": 0, "replicas": 2, "pods": pods(40, 40)}], max_replicas=5, behavior=no_windows())
    assert (up["raw"], up["desired"], up["rule"]) == (20, 5, "TooManyReplicas")
    [down] = run([{"t": 0, "replicas": 4, "pods": pods(0, 0, 0, 0)}], min_replicas=2, behavior=no_windows())
    assert (down["raw"], down["desired"], down["rule"]) == (0, 2, "TooFewReplicas")


def test_current_outside_the_bounds_goes_to_the_bound_without_metrics():
    # reconcileAutoscaler: currentReplicas > maxReplicas → desired = max; < minReplicas → min.
    [r] = run([{"t": 0, "replicas": 9, "pods": pods(*[100] * 9)}], max_replicas=6)
    assert (r["desired"], r["rule"]) == (6, "TooManyReplicas")
    [r] = run([{"t": 0, "replicas": 1, "pods": pods(0)}], min_replicas=3, max_replicas=6)
    assert (r["desired"], r["rule"]) == (3, "TooFewReplicas")


# --- LLM rules: SLO guard, scale to zero, activation, cold start --------------------------------------------------


def test_slo_guard_scales_up_when_ttft_is_over_target_even_inside_tolerance():
    # Waiting 4.2 / 4 = 1.05 is within tolerance, but TTFT p95 3 s > 2 s → one more replica at least,
    # ceil(3 × min(1.5, 2)) = 5 → 5 (the rate policy allows up to 7).
    steps = [{"t": 0, "replicas": 3, "pods": pods(4.2, 4.2, 4.2), "ttft_p95_s": 3.0}]
    [r] = run(steps, slo={"ttft_p95_seconds": 2.0})
    assert (r["desired"], r["rule"]) == (5, "slo_guard")
    assert "TTFT p95 3 s > target 2 s (×1.50)" in r["reason"]


def test_slo_guard_keeps_replicas_while_latency_is_near_target():
    # Waiting 1 / 4 → the metric says ceil(0.25 × 4) = 1, but ITL p95 90 ms is 90% of the 100 ms target (above
    # the 80% headroom): no scale-down below what the guard needs.
    steps = [{"t": 0, "replicas": 4, "pods": pods(1, 1, 1, 1), "itl_p95_s": 0.09}]
    [r] = run(steps, slo={"itl_p95_seconds": 0.1}, behavior=no_windows())
    assert (r["desired"], r["rule"]) == (4, "slo_guard")


def test_a_ttft_over_target_only_by_the_prompts_prefill_floor_holds_and_says_why():
    # Waiting 4 / 4 is on target; TTFT p95 3.1 s misses the 2 s target, but the prompts' own prefill takes
    # 2.9 s (p95): 0.2 s above the floor is within the 2 s allowance, so no replica would help.
    steps = [{"t": 0, "replicas": 3, "pods": pods(4, 4, 4), "ttft_p95_s": 3.1, "ttft_floor_p95_s": 2.9}]
    [r] = run(steps, slo={"ttft_p95_seconds": 2.0})
    assert (r["desired"], r["rule"]) == (3, "prefill_floor")
    assert r["reason"].startswith("TTFT p95 3.1 s is the prompts' own prefill time (floor 2.9 s): more replicas "
                                  "would not help; holding at 3; ")


def test_ttft_above_the_floor_by_more_than_the_allowance_scales_on_the_excess():
    # 6 s − 2.9 s = 3.1 s above the floor, 1.55 × the 2 s allowance → max(3 + 1, ceil(3 × 1.55)) = 5.
    steps = [{"t": 0, "replicas": 3, "pods": pods(4, 4, 4), "ttft_p95_s": 6.0, "ttft_floor_p95_s": 2.9}]
    [r] = run(steps, slo={"ttft_p95_seconds": 2.0})
    assert (r["desired"], r["rule"]) == (5, "slo_guard")
    assert "TTFT p95 above the prefill floor 3.1 s > target 2 s (×1.55)" in r["reason"]


def test_without_a_known_floor_ttft_is_judged_as_an_absolute_p95():
    # The same 3.1 s with no floor: ×1.55 → ceil(3 × 1.55) = 5, as before the floor rule.
    steps = [{"t": 0, "replicas": 3, "pods": pods(4, 4, 4), "ttft_p95_s": 3.1}]
    [r] = run(steps, slo={"ttft_p95_seconds": 2.0})
    assert (r["desired"], r["rule"]) == (5, "slo_guard")


def test_a_serverless_pool_goes_to_zero_after_the_idle_window_and_activates_on_a_held_request():
    steps = [{"t": 0, "replicas": 1, "pods": pods(0), "idle_for_s": 100},
             {"t": 15, "replicas": 1, "pods": pods(0), "idle_for_s": 300},
             {"t": 30, "replicas": 0, "pods": []},
             {"t": 45, "replicas": 0, "pods": [], "pending_activation": 2}]
    idle, zero, quiet, wake = run(steps, min_replicas=0, scale_to_zero_after_s=300)
    assert idle["desired"] == 1  # not idle long enough; the metric path never goes below 1
    assert (zero["desired"], zero["rule"]) == (0, "idle_to_zero")
    assert quiet["desired"] == 0 and quiet["held"] is False
    assert (wake["desired"], wake["rule"]) == (1, "activation")


def test_no_scale_to_zero_while_the_cold_start_is_longer_than_the_idle_gap():
    steps = [{"t": 0, "replicas": 1, "pods": pods(0), "idle_for_s": 320, "cold_start_s": 400},
             {"t": 100, "replicas": 1, "pods": pods(0), "idle_for_s": 420, "cold_start_s": 400}]
    held, zero = run(steps, min_replicas=0, scale_to_zero_after_s=300)
    assert (held["desired"], held["rule"], held["held"]) == (1, "cold_start", True)
    assert zero["desired"] == 0


# --- bad scenarios -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ({"min_replicas": 5, "max_replicas": 2}, "min_replicas (5) must not exceed max_replicas (2)"),
    ({"metrics": [{"name": W, "target_per_replica": 0}]}, "target_per_replica must be a number greater than 0"),
    ({"behavior": {"scale_down": {"stabilization_window_s": 3601}}}, "stabilization_window_s must be whole seconds"),
    ({"behavior": {"scale_up": {"select_policy": "Most"}}}, "select_policy must be one of Max, Min, Disabled"),
    ({"tolerance": 1.5}, "tolerance must be a number from 0"),
])
def test_a_bad_policy_is_refused_naming_the_field(change, message):
    with pytest.raises(PolicyError) as caught:
        run([{"t": 0, "replicas": 1, "pods": pods(1)}], **change)
    assert any(message in p for p in caught.value.problems), caught.value.problems


def test_steps_out_of_order_are_refused():
    with pytest.raises(PolicyError, match=r"steps\[1\]\.t \(5\) is earlier than the step before \(10\)"):
        run([{"t": 10, "replicas": 1, "pods": pods(1)}, {"t": 5, "replicas": 1, "pods": pods(1)}])


def test_an_external_average_value_metric_divides_the_total_by_the_target():
    # replica_calculator.go GetExternalPerPodMetricReplicas (how KEDA's ScaledObject drives the HPA):
    # ratio = total / (target × current); within tolerance keep current, else ceil(total / target).
    from apps.autoscaling.rules import external_replicas

    assert external_replicas(23, 5, 2, 0.1) == 5  # ratio 2.3 → ceil(4.6)
    assert external_replicas(10.4, 5, 2, 0.1) == 2  # ratio 1.04 is within tolerance
    assert external_replicas(0, 5, 3, 0.1) == 0  # the HPA then clamps to minReplicas


def test_reasons_say_one_replica_in_the_singular():
    # 2 pods at 1 waiting each, target 4 → ceil(2 × 0.25) = 1: the reason reads "→ 1 replica", not "1 replicas".
    [down] = run([{"t": 0, "replicas": 2, "pods": pods(1, 1)}], behavior=no_windows())
    assert down["desired"] == 1
    assert down["reason"].endswith("→ 1 replica")
    [up] = run([{"t": 0, "replicas": 1, "pods": pods(14.2)}], behavior=no_windows())
    assert up["reason"].endswith("→ 4 replicas")
