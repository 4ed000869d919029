"""`python -m kubesim serve --api-only`: the API server alone, answering from memory with nothing simulated
(no nodes, no controllers, no fault routes), for measuring what a client itself costs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from kubernetes import client

from tests.kubesim.conftest import deployment
from tests.ports import free_port


def _serve(*flags: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--nodes", "cpu:1",
                             *flags], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    line = proc.stdout.readline()
    assert "listening" in line, line
    return proc, f"http://127.0.0.1:{port}"


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize("api_only", [True, False])
def test_api_only_serves_the_api_without_the_simulated_cluster(api_only):
    proc, url = _serve(*(["--api-only"] if api_only else []))
    try:
        cfg = client.Configuration()
        cfg.host = url
        with client.ApiClient(cfg) as api:
            made = client.AppsV1Api(api).create_namespaced_deployment("default", deployment("web"))
            assert made.spec.replicas == 1  # the API answers in both modes
            assert client.AppsV1Api(api).read_namespaced_deployment("web", "default").metadata.uid == made.metadata.uid
        # The simulated cluster's own routes (faults, here) exist only when the cluster is installed.
        assert _status(f"{url}/kubesim/faults") == (404 if api_only else 200)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
