"""bench/autoscale.py judges builtin against its yardsticks, worked by hand: the cheapest fixed fleet meeting both
attainment aims, and the cheapest KEDA threshold whose TTFT-budget and ITL attainment both reach builtin's."""

from __future__ import annotations

from bench.autoscale import aim_lines, judged


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
