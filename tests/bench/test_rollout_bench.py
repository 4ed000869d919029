"""bench/rollout.py judges seeded rollouts on recorded samples and ends with the interface's JSON object."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_rollout_bench_prints_its_figures_and_no_invented_bad_canary():
    run = subprocess.run([sys.executable, "bench/rollout.py", "--runs", "3", "--json", "--skip-kubesim"], capture_output=True,
                         text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # Identical revisions: each of the 3 A/A rollouts is promoted (the bench's claim is ≥ 99 of 100).
    assert out["aa"] == {"runs": 3, "promoted": 3}
    assert out["slower_10"] == {"verdict": "promoted"} and out["slower_30"] == {"verdict": "rolled_back"}
    # The 2× slower canary's kubesim run was left out: reported as not measured, with the reason.
    assert out["bad_canary"] is None and out["bad_canary_error"] == "not run in kubesim (--skip-kubesim)"
    assert "A/A: 3 of 3 rollouts promoted" in run.stdout
