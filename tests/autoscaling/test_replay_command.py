"""`manage.py autoscale_replay FILE [--json]`: the issue's input and output formats, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

SCENARIO = {
    "policy": {"min_replicas": 1, "max_replicas": 10, "tolerance": 0.1,
               "metrics": [{"name": "waiting_requests_per_replica", "target_per_replica": 4}],
               "behavior": {"scale_up": {"stabilization_window_s": 0, "select_policy": "Max",
                                         "policies": [{"type": "Pods", "value": 4, "period_s": 15}]},
                            "scale_down": {"stabilization_window_s": 300, "select_policy": "Max",
                                           "policies": [{"type": "Percent", "value": 100, "period_s": 15}]}}},
    "steps": [
        {"t": 0, "replicas": 2, "pods": [{"ready": True, "metrics": {"waiting_requests_per_replica": 14.2}},
                                         {"ready": True, "metrics": {"waiting_requests_per_replica": 14.2}}]},
        {"t": 15, "replicas": 6, "pods": [{"ready": True, "metrics": {"waiting_requests_per_replica": 0}}] * 6},
    ],
}


def test_json_output_is_one_object_per_step_and_nothing_else(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO))
    out = StringIO()
    call_command("autoscale_replay", str(path), "--json", stdout=out)
    lines = out.getvalue().splitlines()
    results = [json.loads(line) for line in lines]  # every line is JSON
    # Step 1: ceil(3.55 × 2) = 8, Pods 4 per 15 s from 2 → 6. Step 2: raw ceil(0 × 6) = 0, but 8 was recommended
    # 15 s ago inside the 300 s scale-down window → held at 6.
    assert [(r["t"], r["desired"]) for r in results] == [(0, 6), (15, 6)]
    assert results[0]["reason"] == ("waiting 14.2 per replica > target 4 (×3.55) → 8 replicas; "
                                    "limited by scale-up policy +4 pods / 15 s → 6")
    assert results[1]["held"] is True


def test_text_output_reads_as_sentences(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO))
    out = StringIO()
    call_command("autoscale_replay", str(path), stdout=out)
    assert out.getvalue().splitlines()[0].startswith("t=0s 2 → 6 [ScaleUpLimit] waiting 14.2 per replica")


def test_a_bad_scenario_is_a_command_error_naming_the_fields(tmp_path):
    bad = json.loads(json.dumps(SCENARIO))
    bad["policy"]["max_replicas"] = 0
    bad["steps"][1]["replicas"] = -1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(CommandError) as caught:
        call_command("autoscale_replay", str(path), "--json", stdout=StringIO())
    assert "policy.max_replicas must be a whole number, 1 or more" in str(caught.value)
    assert "steps[1].replicas must be a whole number, 0 or more" in str(caught.value)


def test_the_command_exits_non_zero_with_the_message_on_stderr(tmp_path):
    path = tmp_path / "not-json.json"
    path.write_text("{policy")
    done = subprocess.run([sys.executable, "manage.py", "autoscale_replay", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stdout == ""
    assert "is not JSON" in done.stderr


def test_the_readme_scenario_replays_as_worked_out_by_hand():
    # t=0: ceil(3.55 × 2) = 8, limited to 2 + 4 = 6. t=15: 2 ready pods at 6, 4 not ready; ratio 1.5 up, the 4
    # count as 0 → (12 + 0) / 6 = 2 → ratio 0.5 reverses the direction → keep 6. t=60: raw ceil(0.25 × 6) = 2,
    # the 8 of t=0 is in the 300 s scale-down window → 6. t=400: every earlier recommendation is older than
    # 300 s → 2 (Percent 100 / 15 s allows it).
    out = StringIO()
    call_command("autoscale_replay", "apps/autoscaling/scenarios/burst.json", "--json", stdout=out)
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["desired"] for r in results] == [6, 6, 6, 2]
    assert [r["rule"] for r in results] == ["ScaleUpLimit", "metric", "ScaleDownStabilized", "metric"]
