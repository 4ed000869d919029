"""bench/gpu_sharing.py: its JSON line carries the issue's keys, and its fair share and today's hard quota are
worked by hand."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.gpu_sharing import fair_shares, hard_max

ISSUE_KEYS = {"utilisation", "utilisation_hard_quota", "preemption_seconds", "preempted_in_quota", "partial_groups",
              "fair_share_max_deviation", "lost_requests"}


def test_a_short_run_ends_with_one_json_line_of_the_issues_figures():
    run = subprocess.run([sys.executable, "bench/gpu_sharing.py", "--hours", "0.1", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(out) >= ISSUE_KEYS
    assert 0 < out["utilisation"] <= 1 and 0 < out["utilisation_hard_quota"] <= 1
    assert all(isinstance(out[k], int) for k in ("preempted_in_quota", "partial_groups", "lost_requests"))
    # Whatever the policy decided, every preemption that was waited for is one the run counted.
    assert out["preemptions_waited_for"] <= out["preempted"]


def test_the_fair_share_is_the_nominal_quota_then_the_spare_gpus_split_by_weight():
    # globex wants 2 of its 6: acme and initech get their nominal 6 and 4, and the 4 spare split equally.
    assert fair_shares({"acme": 10, "globex": 2, "initech": 10}) == {"acme": 8.0, "globex": 2.0, "initech": 6.0}
    # initech wants 5: it takes 1 of the 4 spare; acme the other 3.
    assert fair_shares({"acme": 20, "globex": 2, "initech": 5}) == {"acme": 9.0, "globex": 2.0, "initech": 5.0}
    # Everyone above its nominal quota: the nominal quotas (equal weights only split what is spare).
    assert fair_shares({"acme": 9, "globex": 9, "initech": 9}) == {"acme": 6.0, "globex": 6.0, "initech": 4.0}


def test_todays_hard_quota_caps_the_services_maxima_at_the_tenants_quota():
    # acme's 6 L4: 2 production groups of 2 L4 and 2 best-effort replicas; initech's 4: 1 group and 2.
    assert (hard_max("acme", "production"), hard_max("acme", "best-effort")) == (2, 2)
    assert (hard_max("initech", "production"), hard_max("initech", "best-effort")) == (1, 2)
