"""Real processes for integration tests: kubesim serving the Kubernetes API, and Celery workers on the
configured broker consuming queues private to the test (a queue-name prefix), against the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.request import urlopen

import pytest

from controlplane import tasknames
from tests.conftest import reroute
from tests.database import database_url_of_test_db
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO_NODES = "h100-sxm-80gb:1x8,l4-24gb:2x1"


def _stop(proc: subprocess.Popen, told: bool = False) -> str:
    """Stop the process (SIGTERM, then SIGKILL after 20 s) and return its output; `told`: SIGTERM was sent."""
    if not told:
        proc.terminate()
    try:
        output, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
    return output or ""


def kubesim_process(nodes: str = DEMO_NODES, *extra: str):
    """Start a kubesim process with these nodes (and extra `serve` flags); yields its URL, stops it after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start", "--nodes", nodes,
         "--seed", "7", "--pod-network", "loopback", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urlopen(f"{url}/version", timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kubesim did not start:\n" + _stop(proc)) from None
            time.sleep(0.2)
    yield url
    from workers.kube import close_all

    close_all()  # this process's clients of it and their watch caches go with it
    _stop(proc)


@pytest.fixture
def kubesim_url():
    """A kubesim process (nodes, scheduler, controllers, kubelet; pods ready within a second) whose pods the
    host reaches at their addresses, as `make demo`'s (the gateway connects to them)."""
    yield from kubesim_process()


def _start_worker(queues: list[str], extra_env: dict[str, str]) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **extra_env}
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--pool", "solo", "--queues", ",".join(queues),
         "--loglevel", "INFO", "--without-heartbeat", "--without-gossip", "--without-mingle",
         "--hostname", f"test-{uuid.uuid4().hex[:8]}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


@pytest.fixture
def celery_worker_queue(settings):
    """Start `celery worker` on a fresh queue name, yield the name, stop the worker afterwards."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    proc = _start_worker([queue], {})
    yield queue
    output = _stop(proc)
    if proc.returncode not in (0, -15, 143):
        sys.stderr.write(output)


@pytest.fixture
def workers(transactional_db):
    """start(n) → n worker processes consuming this test's own reconcile/default queues on the test DB.

    Tasks the test process enqueues (after commit) are routed to the same private queues.
    """
    from controlplane.celery import app

    prefix = f"t{uuid.uuid4().hex[:8]}-"
    queues = [prefix + q for q in tasknames.QUEUES]
    saved = (app.conf.task_routes, app.conf.task_default_queue)
    app.conf.task_routes = tasknames.routes(prefix)
    app.conf.task_default_queue = prefix + "default"
    reroute(app)
    procs: list[subprocess.Popen] = []

    def start(n: int = 1, only: tuple[str, ...] = ()) -> list[subprocess.Popen]:
        """`only`: the queues (unprefixed names) the workers consume, instead of all of them."""
        env = {"DATABASE_URL": database_url_of_test_db(), "CELERY_QUEUE_PREFIX": prefix}
        chosen = [prefix + q for q in only] if only else queues
        new = [_start_worker(chosen, env) for _ in range(n)]
        procs.extend(new)
        return new

    yield start
    for proc in procs:  # all told at once, so they finish their running tasks side by side, not one after another
        proc.terminate()
    for proc in procs:
        output = _stop(proc, told=True)
        if os.environ.get("SHOW_WORKER_LOGS"):
            sys.stderr.write(output)
    app.conf.task_routes, app.conf.task_default_queue = saved
    reroute(app)
