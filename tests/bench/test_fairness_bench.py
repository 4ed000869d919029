"""bench/fairness.py runs end to end with tiny parameters and ends with its one JSON object: the issue's keys
exactly, a batch of the lowest band served to its last line beside an interactive load and a best-effort flood,
and at most two Redis round trips per request with the queue's counters on."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_fairness_bench_prints_the_aims_figures():
    run = subprocess.run([sys.executable, "bench/fairness.py", "--seconds", "3", "--batch-lines", "20",
                          "--batch-window", "120", "--flood-rate", "10", "--cost-seconds", "1", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(out) == {"fairness", "priority", "added_p50_ms_delta", "redis_round_trips_per_request",
                        "gateway_replicas"}
    assert set(out["fairness"]) == {"max_served_cost_gap", "vtc_bound", "fcfs_max_served_cost_gap"}
    assert set(out["priority"]) == {"interactive_ttft_p95_s", "idle_ttft_p95_s", "batch_lines", "batch_completed"}
    # The largest request: 64 prompt tokens and 64 output tokens, 64 + 2 x 64 = 192; VTC's bound is twice that.
    assert out["fairness"]["vtc_bound"] == 384
    assert out["priority"]["batch_lines"] == 20 and out["priority"]["batch_completed"] == 20
    assert out["priority"]["idle_ttft_p95_s"] > 0 and out["priority"]["interactive_ttft_p95_s"] > 0
    assert 1.0 < out["redis_round_trips_per_request"] <= 2.0
    assert out["gateway_replicas"] == 3
