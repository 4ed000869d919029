"""bench/cold_start.py ends with the interface's JSON object; its start-up figures follow the phases worked by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_the_cold_start_bench_prints_the_interface_object_last_in_a_fresh_shell():
    run = subprocess.run([sys.executable, "bench/cold_start.py", "--json"], capture_output=True, text=True,
                         timeout=120, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(out) == {"activation_s", "scale_1_to_4_s", "source_downloads", "gpu_hours", "activation_p95_s"}
    assert set(out["activation_s"]) == {"llama-8b-l4", "llama-70b-4xh100"}
    for figures in out["activation_s"].values():
        assert set(figures) == {"none", "cluster_cache", "node_cache", "sleep"}
    assert set(out["scale_1_to_4_s"]) == {"prefetch", "none"}
    assert set(out["gpu_hours"]) == set(out["activation_p95_s"]) == {"sleep", "delete"}
    # Llama-3.1-8B (16.06 GB) on an L4: 80.3 s of download + 8.03 s of cluster-cache read + 0.637 s over PCIe 4.0
    # + 20 s of init = 108.97 s; from the node's disk 3.212 + 0.637 + 20 = 23.85 s.
    assert out["activation_s"]["llama-8b-l4"]["none"] == 109.0
    assert out["activation_s"]["llama-8b-l4"]["node_cache"] == 23.8
    # 70B (141.2 GB) on 4 x H100: three replicas reading the cluster cache together get 4/3 GB/s each: 105.9 s,
    # + 0.700 s over PCIe 5.0 + 20 s = 126.6 s; from prefetched node copies 28.24 + 0.700 + 20 = 48.9 s.
    assert out["scale_1_to_4_s"] == {"prefetch": 48.9, "none": 126.6}
    assert out["source_downloads"] == 1
