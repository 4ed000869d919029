"""bench/whatif.py replays 8 scenarios and 3 kubesim configurations and ends with the interface's JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_the_whatif_bench_prints_speed_memory_and_fidelity():
    # A short run: 3 minutes of 5 requests/s, 6 s of load per kubesim configuration (all three at once), without the
    # search (its hour of load and 10 minutes in kubesim; tests/whatif/test_search.py tests the search). The bench
    # makes its own throwaway database from DATABASE_URL's server.
    run = subprocess.run([sys.executable, "bench/whatif.py", "--hours", "0.05", "--fidelity-seconds", "6", "--no-search",
                          "--fidelity-at-once", "--json"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(out) >= {"requests", "scenarios", "wall_s", "cpu_s", "speedup", "speedup_wall", "rss_mb", "fidelity"}
    # 5/s for 180 s is about 900 arrivals (a Poisson count: well within 800..1000).
    assert 800 < out["requests"] < 1000 and out["scenarios"] == 8
    # speedup is 8 x the load's length over the replaying thread's CPU time, speedup_wall the same over the
    # wall clock; one thread's CPU time cannot exceed the wall time it ran in.
    assert out["speedup"] == pytest.approx(8 * 180 / out["cpu_s"], rel=0.05)
    assert out["speedup_wall"] == pytest.approx(8 * 180 / out["wall_s"], rel=0.05)
    assert 0 < out["cpu_s"] <= out["wall_s"] + 0.05
    assert 0 < out["rss_mb"] < 2000
    assert [f["config"] for f in out["fidelity"]] == ["1 L4", "2 L4s", "1 L4, fp8 KV"]
    for row in out["fidelity"]:
        assert set(row) == {"config", "ttft_p95_error_pct", "gpu_hours_error_pct"}
        assert isinstance(row["ttft_p95_error_pct"], float)
