"""bench/autoscale.py judges builtin against its yardsticks, worked by hand: the cheapest fixed fleet meeting both
attainment aims, and the cheapest KEDA threshold whose TTFT-budget and ITL attainment both reach builtin's."""

from __future__ import annotations

from bench.autoscale import aim_lines, judged, where_lines, where_the_hours_go


def row(gpu_hours, ttft, itl, **extra):
    return {"gpu_hours": gpu_hours, "slo_attainment": ttft, "itl_slo_attainment": itl, **extra}


# Threshold 1 reaches builtin's 97 % / 93 %; 2 misses on ITL (92 %), 3 on the TTFT budget (96 %), though cheaper.
SWEEP = {1: row(7.0, 0.98, 0.95), 2: row(6.5, 0.97, 0.92), 3: row(6.0, 0.96, 0.95)}
SIX = row(6.0, 0.99, 0.91, replicas=6)


def test_builtin_meeting_the_aims_for_less_than_the_fleet_and_0_8x_keda():
    # 5.0 ≤ the 6-replica fleet's 6.0 with 97 % ≥ 95 % and 93 % ≥ 90 %; 5.0 ≤ 0.8 × 7.0 = 5.6.
    aims = judged(row(5.0, 0.97, 0.93), [SIX], SWEEP)
    assert aims == {"fixed_fleet_aim_met": True, "keda_reaching_threshold": 1, "keda_aim_met": True}


def test_builtin_spending_more_than_the_fleet_or_0_8x_keda_misses_both():
    # 6.5 > 6.0, and 6.5 > 5.6.
    aims = judged(row(6.5, 0.97, 0.93), [SIX], SWEEP)
    assert aims == {"fixed_fleet_aim_met": False, "keda_reaching_threshold": 1, "keda_aim_met": False}
    # Cheaper than the fleet but under the ITL aim (89 % < 90 %): not met either.
    assert judged(row(5.0, 0.97, 0.89), [SIX], SWEEP)["fixed_fleet_aim_met"] is False


def test_nothing_to_judge_is_said_in_words():
    # No fleet meets the aims and no threshold reaches 99 % / 99 %: neither aim is judged.
    aims = judged(row(5.0, 0.99, 0.99), [], SWEEP)
    assert aims == {"fixed_fleet_aim_met": None, "keda_reaching_threshold": None, "keda_aim_met": None}
    out = {"policies": {"builtin": row(5.0, 0.99, 0.99), "builtin_reactive": row(4.0, 0.95, 0.9)},
           "cheapest_fixed_meeting_aims": None, "fixed_sweep": [],
           "keda_sweep": [{"threshold": t, **r} for t, r in SWEEP.items()],
           "aims": {**aims, "ttft_floor_met": True, "itl_floor_met": True}}
    assert aim_lines(out) == [
        "builtin:          5.00 GPU-h, TTFT budget 99.0%, ITL 99.0%",
        "builtin_reactive: 4.00 GPU-h, TTFT budget 95.0%, ITL 90.0%",
        "cheapest fixed fleet meeting TTFT budget >= 95% and ITL >= 90%: none up to 16 replicas",
        "aim: builtin meets both with GPU-h <= that fleet's: not judged",
        "floor (builtin >= builtin_reactive): TTFT budget met, ITL met",
        "cheapest KEDA threshold reaching builtin's attainment: none reaches builtin's TTFT budget and ITL "
        "attainment (threshold 1-10)"]


def test_where_the_replica_hours_go_against_the_fixed_fleet():
    # Evaluations every 360 s (0.1 h each) with 2, 6, 4, 5 replicas after them: 17 × 0.1 = 1.7 replica-hours; the
    # first 720 s hold 2 + 6 = 8 → 0.8. Against 4 fixed replicas: above by 0 + 2 + 0 + 1 = 3 → 0.3, below by
    # 2 + 0 + 0 + 0 → 0.2. Windows of 720 s: the counts after t = 360 and 720 (mean 4), after 1,080 and 1,440 (4.5).
    timeline = [(360.0, 2, None), (720.0, 6, 1.0), (1080.0, 4, 0.5), (1440.0, 5, 0.4)]
    w = where_the_hours_go(timeline, 4, period_s=360.0, head_s=720.0, window_s=720.0)
    assert w == {"replica_hours": 1.7, "first_replica_hours": 0.8, "mean_replicas_per_window": [4.0, 4.5],
                 "above_fleet_replica_hours": 0.3, "below_fleet_replica_hours": 0.2}
    # No fleet meets the aims: nothing to compare against.
    assert "above_fleet_replica_hours" not in where_the_hours_go(timeline, None, period_s=360.0)
    out = {"cheapest_fixed_meeting_aims": 4, "where": {"builtin": {**w, "floor_set_evaluations": [1, 4]}}}
    assert where_lines(out) == [
        "where builtin's replica-hours go: 1.70 in all, 0.80 in the first 5 minutes, above the 4-replica fleet 0.30, "
        "below it 0.20; the reactive floor set the count in 1 of 4 evaluations; mean replicas per 5 minutes: 4 4.5"]
    assert where_lines({"cheapest_fixed_meeting_aims": 4}) == []
