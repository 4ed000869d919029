"""A real Celery worker process on the configured broker, consuming a queue private to the test."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def celery_worker_queue(settings):
    """Start `celery worker` on a fresh queue name, yield the name, stop the worker afterwards."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo",
         "--queues", queue, "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip",
         "--without-mingle"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield queue
    finally:
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode not in (0, -15, 143):
            sys.stderr.write(output)
