"""bench/sleep_wake.py's figures(): exactly the keys bench/cold_start.py reads, and a day of the demo's serverless
traffic worked by hand (a request every 300 + 1 s, idle window 120 s)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("sleep_wake", Path(__file__).parents[2] / "bench" / "sleep_wake.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_the_demo_traffic_and_policy_are_read_from_the_procfile_and_seed_demo():
    assert bench.demo_traffic() == {"period_s": 301.0, "prompt": 200, "output": 32}
    assert bench.demo_idle_policy() == {"scale_to_zero_after_seconds": 120, "when_idle": "auto",
                                        "wake_objective_seconds": 10}


def test_a_day_worked_by_hand():
    # 86,400 / 301 = 287 requests; delete holds 1 GPU for 27 + 0.2 + 120 s each = 287 x 147.2 s = 11.74 GPU-h.
    daily = bench.day({"period_s": 301.0}, 120, {"awake": 0.2, "from_sleep": 1.3}, 27.0)
    assert daily["requests"] == 287
    assert daily["gpu_hours"] == {"sleep": 24.0, "delete": pytest.approx(11.74, abs=0.005)}
    assert daily["activation_p95_s"] == {"sleep": 1.3, "delete": 27.2}


def test_figures_has_exactly_the_keys_the_cold_start_bench_reads():
    figures = bench.figures()
    assert set(figures) == {"activation_s", "gpu_hours", "activation_p95_s"}
    assert set(figures["activation_s"]) == {"llama-8b-l4", "llama-70b-4xh100"}
    assert set(figures["gpu_hours"]) == set(figures["activation_p95_s"]) == {"sleep", "delete"}
    # A wake copies the weights over the host link (>= 0.5 s overhead); no figure can be below that.
    assert all(seconds > 0.5 for seconds in figures["activation_s"].values())
    assert figures["activation_p95_s"]["sleep"] < figures["activation_p95_s"]["delete"]
