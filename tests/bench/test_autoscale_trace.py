"""bench/autoscale.py replays a recorded trace file: its own arrivals and lengths, over-context requests left out."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_jsonl_trace_is_replayed_with_its_own_requests_and_over_context_ones_counted(tmp_path):
    rows = [{"timestamp": 10 + 2 * i, "prompt_tokens": 500, "output_tokens": 20} for i in range(30)]
    rows.append({"timestamp": 75, "prompt_tokens": 8000, "output_tokens": 500})  # 8,500 > the 8,192 context
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    run = subprocess.run([sys.executable, "bench/autoscale.py", "--trace-file", str(path), "--format", "jsonl",
                          "--windows", "0.5", "--json"], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["requests"] == 30 and out["over_context"] == 1
    assert out["hours"] == round(65 / 3600, 3)  # the trace's own length: first arrival at 10 s, last at 75 s
    fixed = out["policies"]["fixed_peak"]
    assert fixed["slo_attainment"] is not None and fixed["peak_replicas"] >= 1
    # Fixed fleets of 1-16 replicas hold their GPUs the trace's 65 s: N × 65 / 3,600 GPU-hours.
    assert [(f["replicas"], f["gpu_hours"]) for f in out["fixed_sweep"]] == [
        (n, round(n * 65 / 3600, 2)) for n in range(1, 17)]
    # Per 30 s of arrival time, counted from the first arrival: the 30 kept arrive 0, 2, …, 58 s after it.
    windows = out["policies"]["builtin"]["windows"]
    assert [(w["start_min"], w["requests"]) for w in windows] == [(0.0, 15), (0.5, 15)]


def test_a_bad_trace_file_stops_the_bench_naming_the_line():
    run = subprocess.run([sys.executable, "bench/autoscale.py", "--trace-file", "/dev/null", "--format", "azure"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "line 1: the azure format needs the columns TIMESTAMP" in run.stderr
