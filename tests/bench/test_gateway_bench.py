"""bench/gateway.py runs end to end on a small load and prints its one JSON object: the added latency against
the same engine called directly, Redis round trips per request, and no more than the limit through 10 replicas."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_gateway_bench_prints_its_figures_and_the_limit_holds_across_ten_replicas():
    run = subprocess.run([sys.executable, "bench/gateway.py", "--rate", "40", "--seconds", "2", "--no-litellm",
                          "--json"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for side in ("direct", "gateway"):
        assert out[side]["failed"] == 0 and out[side]["p50_ms"] <= out[side]["p99_ms"]
    assert out["litellm"] is None and out["litellm_error"] == "skipped (--no-litellm)"
    assert out["added_p50_ms"] == round(out["gateway"]["p50_ms"] - out["direct"]["p50_ms"], 3)
    # One round trip to check each request let through, and at most one to settle it (requests that end in
    # the same turn of the event loop share one pipeline of settles).
    assert 1.0 < out["redis_round_trips_per_request"] <= 2.0
    limits = out["limits"]
    assert (limits["replicas"], limits["clients"], limits["sent"], limits["limit_rpm"]) == (10, 200, 600, 100)
    assert limits["allowed"] == 100
    assert out["snapshot"] == {"keys": 10_000, "services": 1_000, "active_keys": 1_000}
