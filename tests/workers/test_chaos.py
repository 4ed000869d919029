"""The short chaos campaign: bench/chaos.py with four services must report everything converged, every change
applied and nothing re-applied. It starts its own PostgreSQL, broker, kubesim and workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_a_short_chaos_campaign_converges_and_loses_nothing():
    run = subprocess.run([sys.executable, "bench/chaos.py", "--services", "4", "--workers", "2", "--budget", "300",
                          "--resync", "5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=480)
    report = run.stdout
    assert run.returncode == 0, report + run.stderr[-3000:]
    assert "converged (Ready, up to date) 4/4" in report
    assert "exactly one per pool: True" in report
    assert "last changes on the cluster   8/8" in report
    assert "writes in the quiet window    0 (Deployment generations moved: 0)" in report
    assert "killed with -9 mid-pass" in report and "broker restarted" in report and "PostgreSQL restarted" in report
