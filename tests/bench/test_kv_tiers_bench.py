"""bench/kv_tiers.py ends with the interface's JSON object (the figures themselves are the bench's, not a test's)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_kv_tiers_bench_prints_the_interface_object_last():
    run = subprocess.run([sys.executable, "bench/kv_tiers.py", "--json", "--duration", "20", "--scale", "20"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(out) == {"ttft_p95_s", "throughput_tok_s", "hit_rate", "curve"}
    assert set(out["ttft_p95_s"]) == set(out["throughput_tok_s"]) == {"none", "cpu_tier"}
    assert set(out["curve"]) == {"predicted_hit_rate_2x", "measured_hit_rate_2x"}
    # Eight requests of 20 simulated seconds: the tier already serves some of the prefixes the GPU dropped.
    assert out["hit_rate"]["cpu"] > 0 and 0 < out["hit_rate"]["gpu"] + out["hit_rate"]["cpu"] <= 1
    assert all(v > 0 for part in ("ttft_p95_s", "throughput_tok_s") for v in out[part].values())
