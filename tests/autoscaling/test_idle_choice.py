"""Sleep or delete, worked by hand: the scale-to-zero rule's choice for an idle pool from the service's own wake
history, its policy setting and its wake objective, with the reason in words."""

from __future__ import annotations

from apps.autoscaling.idle import DELETE, SLEEP, choose, idle_gaps
from apps.serving.idle_spec import IdleSpec

AUTO_10 = IdleSpec("auto", 1, 10.0)


def test_the_policy_setting_decides_when_it_is_not_auto():
    assert choose(IdleSpec("delete"), gaps_s=[30], wake_s=1.2, cold_start_s=400, gpus=4).action == DELETE
    chosen = choose(IdleSpec("sleep", 2), gaps_s=[], wake_s=19.2, cold_start_s=None, gpus=4)
    assert (chosen.action, chosen.reason) == (
        SLEEP, "when_idle is sleep: sleep at level 2 (wakes in ~19 s, keeps its 4 GPU(s))")


def test_only_sleep_meets_the_objective_when_the_cold_start_is_longer():
    # 70B on 4 x H100: wake 1.2 s, cold start 95 s; objective 10 s.
    chosen = choose(AUTO_10, gaps_s=[3600.0], wake_s=1.2, cold_start_s=95.0, gpus=4)
    assert chosen.action == SLEEP
    assert chosen.reason == ("wake objective 10 s; sleep wakes in ~1.2 s, a cold start takes 95 s; only sleep "
                             "meets it → sleep at level 1 (wakes in ~1.2 s, keeps its 4 GPU(s))")


def test_both_meet_the_objective_and_the_median_gap_picks_the_cheaper():
    spec = IdleSpec("auto", 1, 60.0)
    # Gaps 20, 30, 40 s: median 30 s. Sleep holds 4 GPUs for 30 s = 120 GPU-s = 0.03 GPU-h; delete reloads
    # for 45 s on 4 GPUs = 180 GPU-s = 0.05 GPU-h: sleep is cheaper.
    short = choose(spec, gaps_s=[40.0, 20.0, 30.0], wake_s=1.2, cold_start_s=45.0, gpus=4)
    assert short.action == SLEEP and short.gap_s == 30.0
    assert "median idle gap 30 s over the last 3 wake(s): sleep 0.03 GPU-h against delete 0.05 GPU-h" in short.reason
    # Gaps of an hour: sleep would hold 4 GPU-h a gap against 0.05 for a reload.
    long = choose(spec, gaps_s=[3600.0, 3600.0], wake_s=1.2, cold_start_s=45.0, gpus=4)
    assert long.action == DELETE
    assert long.reason.endswith("sleep 4.00 GPU-h against delete 0.05 GPU-h a gap → delete")


def test_without_history_or_a_measured_cold_start():
    spec = IdleSpec("auto", 1, 60.0)
    assert choose(spec, gaps_s=[], wake_s=1.2, cold_start_s=45.0, gpus=1).action == DELETE
    unknown = choose(AUTO_10, gaps_s=[], wake_s=1.2, cold_start_s=None, gpus=1)
    assert unknown.action == SLEEP and "deleting could not be judged against it" in unknown.reason
    # Neither meets 10 s: a level 2 wake of 19 s and a 95 s cold start; the faster one.
    neither = choose(IdleSpec("auto", 2, 10.0), gaps_s=[], wake_s=19.0, cold_start_s=95.0, gpus=4)
    assert neither.action == SLEEP and "neither meets it → the faster" in neither.reason


def test_only_the_last_twenty_wakes_count():
    # 21 gaps: the first (10,000 s) falls out, leaving twenty 10 s gaps: median 10 s, sleep is cheaper.
    chosen = choose(IdleSpec("auto", 1, 60.0), gaps_s=[10_000.0] + [10.0] * 20, wake_s=1.0, cold_start_s=30.0,
                    gpus=1)
    assert chosen.action == SLEEP and chosen.gap_s == 10.0


def test_idle_gaps_run_from_going_idle_to_the_next_wake():
    events = [(0.0, "idle"), (100.0, "wake"), (150.0, "idle"), (160.0, "idle"), (400.0, "wake"), (500.0, "wake"),
              (600.0, "idle")]
    assert idle_gaps(events) == [100.0, 250.0]  # a repeated idle keeps its first time; an unended gap is not one
