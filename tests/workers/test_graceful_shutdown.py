"""SIGTERM to a worker started as the image starts it (`python -m controlplane.entrypoint worker`): the task
it is running finishes, the worker exits cleanly within the pod's grace period, and every task runs exactly
once (the queued ones by the next worker, or a fetched one by this worker before it exits), so none is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.deploy.manifests import find, render
from tests.polling import wait_for
from tests.workers.conftest import ROOT, _stop

pytestmark = pytest.mark.integration


def start_worker(prefix: str) -> subprocess.Popen:
    env = {**os.environ, "CELERY_QUEUE_PREFIX": prefix, "WORKER_CONCURRENCY": "1",
           "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    return subprocess.Popen(
        [sys.executable, "-m", "controlplane.entrypoint", "worker", "--include", "tests.workers.slow_tasks",
         "--without-heartbeat", "--without-gossip", "--without-mingle", "--hostname", f"{prefix}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def send(app, prefix: str, folder, name: str, seconds: float) -> None:
    app.send_task("tests.workers.slow_tasks.mark", args=[str(folder), name, seconds], queue=prefix + "default")


def runs(folder) -> list[str]:
    log = folder / "runs.log"
    return log.read_text().splitlines() if log.exists() else []


def test_sigterm_lets_the_running_task_finish_and_loses_none(tmp_path):
    from controlplane.celery import app

    grace = find(render("production"), "Deployment", "controlplane-worker")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    worker = start_worker(prefix)
    try:
        # The long task goes first and the others only once it runs: no broker promises delivery in send order
        # (the folder broker lists files by name), and no task of the product needs it, since every task reloads
        # its row and acts on the difference. What is pinned here is which task is running at SIGTERM.
        send(app, prefix, tmp_path, "first", 4.0)
        wait_for(lambda: "first started" in runs(tmp_path), timeout=90, interval=0.1,
                 message="the worker to start the first task")
        send(app, prefix, tmp_path, "second", 0.1)
        send(app, prefix, tmp_path, "third", 0.1)
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=grace)  # the kubelet would SIGKILL after the grace period
    finally:
        output = _stop(worker)
    assert worker.returncode == 0, output
    # The running task finished. A queued task the consumer had already fetched when the signal came may also
    # run before the worker exits (the folder broker's consumer polls; seen on a loaded machine): whatever this
    # worker started, it finished within the grace period.
    before = runs(tmp_path)
    assert before[:2] == ["first started", "first done"], output
    assert all(f"{line.split()[0]} done" in before for line in before if line.endswith("started")), output

    successor = start_worker(prefix)
    try:
        wait_for(lambda: len(runs(tmp_path)) == 6, timeout=90, interval=0.1,
                 message="the next worker to run the tasks left queued")
    finally:
        _stop(successor)
    # Each task ran exactly once, one after the other: the finished ones were not delivered again, the queued
    # ones were not lost; the two queued ones may come in either order and in either worker.
    log = runs(tmp_path)
    assert log[:2] == ["first started", "first done"]
    pairs = sorted(zip(log[2::2], log[3::2], strict=True))
    assert pairs == [("second started", "second done"), ("third started", "third done")]
