"""`make demo`'s gateway on Redis: `python -m gateway.demo_redis`, whose answer the demo exports as
GATEWAY_REDIS_URL, names the Redis configured, else one answering at the default, else none, and says which;
the Procfile's gateway line, run twice as honcho runs it with that URL, shares one limit between the two."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
import uuid

import pytest
import redis

from tests.gateway.conftest import post, status_of
from tests.polling import wait_for
from tests.ports import closed_port, free_port
from tests.workers.conftest import ROOT
from tests.workers.test_demo_worker_stop import procfile_command

pytestmark = pytest.mark.django_db
SHARED = "redis://127.0.0.1:6379/11"  # the tests' Redis database


def demo_redis(configured: str | None, *args: str) -> tuple[str, str]:
    """(stdout, stderr) of `python -m gateway.demo_redis` with GATEWAY_REDIS_URL set to `configured` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_REDIS_URL"}
    if configured is not None:
        env["GATEWAY_REDIS_URL"] = configured
    out = subprocess.run([sys.executable, "-m", "gateway.demo_redis", *args], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=30, check=True)
    return out.stdout.strip(), out.stderr.strip()


def test_the_demo_says_where_its_gateway_keeps_limits():
    # The tests' machine runs a Redis at the default address: the demo finds it.
    url, said = demo_redis(None)
    assert url == "redis://127.0.0.1:6379/1" and "shared in Redis at redis://127.0.0.1:6379/1" in said
    with closed_port() as port:
        nowhere = f"redis://127.0.0.1:{port}/1"
        assert demo_redis(None, "--default", nowhere) == (
            "", "Gateway limits: per process (no Redis configured: set GATEWAY_REDIS_URL)")
        # One configured is used even while it does not answer (the gateway falls back until it does).
        url, said = demo_redis(nowhere)
        assert url == nowhere and f"shared in Redis at {nowhere} (not answering now" in said
    assert demo_redis(SHARED)[0] == SHARED


def demo_gateway(world, tmp_path, redis_url: str, prefix: str):
    """The Procfile's gateway line as honcho runs it (through sh, in a group of its own), on a free port and the
    test's snapshot, metering nothing; (process, base URL)."""
    port = free_port()
    command = procfile_command("gateway")
    for demo, test in (("sleep 5; ", ""), ("--port 8080", f"--port {port}"),
                       (".data/gateway/snapshot.json", str(world["path"])),
                       (".data/gateway/spool", str(tmp_path / f"spool-{port}"))):
        assert demo in command
        command = command.replace(demo, test)
    command = command.removesuffix("'") + f" --redis-prefix {prefix}'"
    env = {**os.environ, "GATEWAY_REDIS_URL": redis_url, "DATABASE_URL": ""}
    proc = subprocess.Popen(command, shell=True, start_new_session=True, cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: status_of(f"{base}/readyz") == 200, timeout=20)
    return proc, base


def test_two_demo_gateways_share_a_limit_in_the_redis_the_demo_names(world, tmp_path):
    url, _ = demo_redis(SHARED)
    prefix = f"test:{uuid.uuid4().hex}:"
    gateways: list = []
    try:
        for _ in range(2):
            gateways.append(demo_gateway(world, tmp_path, url, prefix))
        (_, first), (_, second) = gateways
        for base in (first, second):
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                assert "gateway_redis_up 1.0" in response.read().decode()
        body = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}'
        # The key allows 2 requests a minute: one through each gateway, then neither lets a third through.
        assert [post(base, world["limited"], body)[0] for base in (first, second, first, second)] == [
            503, 503, 429, 429]
    finally:
        for proc, _ in gateways:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        shared = redis.Redis.from_url(SHARED)
        for name in shared.scan_iter(f"{prefix}*"):
            shared.delete(name)
