"""Issue 25's "done when" for metering, against a gateway process: SIGTERM in the middle of 100 streaming
requests loses no usage row, and neither does PostgreSQL going away for a while (a relay to it stopped and
started again), whether rows wait in memory or in the spool on disk."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone

from apps.gateway.models import Upstream, UsageRow
from apps.gateway.snapshot import write_snapshot
from apps.serving.models import InferenceService
from tests.database import database_url_of_test_db
from tests.gateway.conftest import post, status_of
from tests.gateway.fake_engine import USAGE, engine_in_thread
from tests.gateway.tcp_proxy import Relay
from tests.gateway.test_spool import metrics
from tests.polling import wait_for
from tests.ports import free_port

STREAMS = 100


def serve_chat_from(world, tenant, port: int) -> None:
    """The tenant's `chat` served by the fake engine on `port`, in the snapshot."""
    chat = InferenceService.objects.get(tenant=tenant, name="chat")
    Upstream.objects.create(service=chat, ready_engines=1, seen_at=timezone.now(),
                            endpoints=[{"pod": "chat-0", "address": f"127.0.0.1:{port}"}])
    write_snapshot(world["path"])


def start(world, *extra: str, env: dict | None = None):
    """(process, port, base URL) of a gateway on the world's snapshot, ready; `env` in place of this one's."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                             "--snapshot", str(world["path"]), *extra], env=env)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: status_of(f"{base}/readyz") == 200, timeout=20)
    return proc, port, base


def test_sigterm_during_100_streams_loses_no_usage_row(transactional_db, world, tenant_a):
    started = threading.Semaphore(0)

    def stream(port: int) -> bytes:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = {"model": "chat", "prompt": "hi", "stream": True, "delay_s": 0.1}
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"authorization": f"Bearer {world['all']}", "content-type": "application/json"})
        response = conn.getresponse()
        first = response.readline()
        started.release()
        return first + response.read()

    with engine_in_thread() as engine_port:
        serve_chat_from(world, tenant_a, engine_port)
        # Only the drain on SIGTERM can write these rows.
        proc, port, _ = start(world, "--database-url", database_url_of_test_db(), "--usage-flush-seconds", "600")
        try:
            with ThreadPoolExecutor(STREAMS) as pool:
                answers = [pool.submit(stream, port) for _ in range(STREAMS)]
                for _ in range(STREAMS):
                    assert started.acquire(timeout=30), "a stream did not start"
                proc.send_signal(signal.SIGTERM)  # every stream is under way, none has ended
                bodies = [answer.result(timeout=40) for answer in answers]
            assert proc.wait(timeout=40) in (0, -signal.SIGTERM)
        finally:
            proc.kill()
    assert all(body.endswith(b"data: [DONE]\n\n") for body in bodies)
    rows = list(UsageRow.objects.all())
    assert len(rows) == STREAMS
    assert all((r.status, r.streamed, r.disconnected, r.prompt_tokens, r.completion_tokens)
               == (200, True, False, USAGE["prompt_tokens"], USAGE["completion_tokens"]) for r in rows)


def database_behind() -> tuple[Relay, str]:
    """A relay to the test database, and the URL of the database through it."""
    s = connection.settings_dict
    host, port = s["HOST"] or "/var/run/postgresql", int(s["PORT"] or 5432)
    target = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (socket.AF_INET, (host, port))
    relay = Relay(target)
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return relay, f"postgres://{s['USER']}{password}@127.0.0.1:{relay.port}/{s['NAME']}"


@pytest.mark.parametrize("spool", [False, True], ids=["in-memory", "spool-on-disk"])
def test_postgresql_gone_for_a_while_loses_no_usage_row(transactional_db, world, tmp_path, spool):
    relay, url = database_behind()
    relay.start()
    extra = ["--spool-dir", str(tmp_path / "spool")] if spool else []
    proc, _, base = start(world, "--database-url", url, "--usage-flush-seconds", "0.2", *extra)
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}).encode()
    try:
        assert [post(base, world["all"], body)[0] for _ in range(5)] == [503] * 5
        wait_for(lambda: UsageRow.objects.count() == 5, message="rows while the database is there")
        relay.stop()
        assert [post(base, world["all"], body)[0] for _ in range(40)] == [503] * 40
        # Generous timeouts: on a loaded machine the gateway's writer takes a while to find the database gone.
        wait_for(lambda: (metrics(base)["gateway_usage_database_up"], metrics(base)["gateway_usage_waiting_rows"])
                 == (0, 40), timeout=60, message="the rows waiting for the database")
        relay.start()
        # The spool says the database is back once its replay has returned: both, in time.
        wait_for(lambda: (metrics(base)["gateway_usage_waiting_rows"], metrics(base)["gateway_usage_database_up"])
                 == (0, 1), timeout=60, message="the rows written")
        assert metrics(base)["gateway_usage_written_rows"] == 45
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        relay.stop()
    assert UsageRow.objects.filter(status=503, model="chat").count() == UsageRow.objects.count() == 45
    assert not UsageRow.objects.filter(added_ms__isnull=False).exists()  # nothing was forwarded
