"""Usage rows: COPYed in batches by the writer, kept in order while PostgreSQL is unreachable (bounded),
and flushed when the gateway gets SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from apps.gateway.models import UsageRow
from gateway.metering import UsageWriter
from gateway.prefix import hash_key
from tests.database import database_url_of_test_db
from tests.gateway.conftest import post, status_of
from tests.polling import wait_for
from tests.ports import closed_port, free_port

KEY = hash_key()  # the one the gateway processes of the tests derive too: they inherit the environment


def usage(writer, tenant, status, model="chat"):
    writer.record(tenant_id=tenant.pk, key_id=9, service_id=None, model=model, pod="", status=status,
                  prompt_tokens=3, cached_tokens=1, completion_tokens=2, ttft_ms=None, duration_ms=1.5,
                  streamed=False, disconnected=False)


def test_rows_are_copied_in_batches(transactional_db, tenant_a):
    writer = UsageWriter(database_url_of_test_db(), prefix_key=KEY, batch_rows=1000)
    for i in range(2500):
        usage(writer, tenant_a, 200 + i % 2)
    assert writer.flush() and writer.written == 2500
    assert UsageRow.objects.filter(tenant=tenant_a).count() == 2500
    assert UsageRow.objects.filter(status=201).count() == 1250


def test_rows_wait_while_the_database_is_down_and_the_spool_is_bounded(transactional_db, tenant_a):
    with closed_port() as port:
        writer = UsageWriter(f"postgres://postgres@127.0.0.1:{port}/none", prefix_key=KEY, max_rows=3)
        for status in (200, 201, 202, 203, 204):
            usage(writer, tenant_a, status)
        assert writer.flush() is False
    assert (len(writer.rows), writer.dropped) == (3, 2)
    writer.database_url = database_url_of_test_db()
    assert writer.flush()
    assert sorted(UsageRow.objects.values_list("status", flat=True)) == [202, 203, 204]


def test_sigterm_flushes_every_requests_row(transactional_db, world, tenant_a):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                             "--snapshot", str(world["path"]), "--database-url", database_url_of_test_db(),
                             # Only the drain on SIGTERM can write these rows.
                             "--usage-flush-seconds", "600"])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: status_of(f"{base}/readyz") == 200, timeout=20)
        body = {"messages": [{"role": "user", "content": "hi"}]}
        statuses = [post(base, world["all"], json.dumps({**body, "model": m}).encode())[0]
                    for m in ("chat", "secret-b", "sql-lora")]
        assert statuses == [503, 404, 503]
        assert post(base, "sk-wrong", b"{}")[0] == 401  # no key, no tenant: nothing to meter
        assert not UsageRow.objects.exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises SIGTERM once its graceful shutdown (and our flush) is done.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    rows = UsageRow.objects.filter(tenant=tenant_a).order_by("id")
    assert [(r.model, r.status, r.service_id is None) for r in rows] == [
        ("chat", 503, False), ("secret-b", 404, True), ("sql-lora", 503, False)]
    assert rows[0].service_id == rows[2].service_id

