"""bench/reconcile.py compares against kubectl only within kubectl's version skew policy (one minor version)."""

from __future__ import annotations

import json
import subprocess

from bench.common import kubectl_against, kubectl_skew_problem

SERVER = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-kubesim"}


def test_kubectl_within_one_minor_version_of_the_api_server_is_compared():
    assert kubectl_skew_problem({"major": "1", "minor": "30", "gitVersion": "v1.30.2"}, SERVER) is None
    assert kubectl_skew_problem({"major": "1", "minor": "32+", "gitVersion": "v1.32.4-x"}, SERVER) is None


def test_older_kubectl_is_refused_naming_both_versions_and_what_to_install():
    problem = kubectl_skew_problem({"major": "1", "minor": "20", "gitVersion": "v1.20.9"}, SERVER)
    assert "v1.20.9" in problem and "v1.31.0-kubesim" in problem and "kubectl 1.30 or newer" in problem


def test_the_kubectl_on_path_is_checked_against_a_running_kubesim(make_cluster):
    cluster = make_cluster(nodes="cpu:1")
    path, version = kubectl_against(cluster.url)
    client = json.loads(subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True,
                                       text=True, check=True).stdout)["clientVersion"]
    assert version == client["gitVersion"] and version.startswith("v1.")

