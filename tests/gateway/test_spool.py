"""The usage spool on disk: rows wait in segment files while PostgreSQL is unreachable, are written exactly
once when it is back (also after a crash between a segment's commit and its deletion, and after the gateway
process is killed), and the spool's bound drops the oldest rows, counted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.gateway.models import UsageBatch, UsageRow
from gateway.metering import UsageWriter
from tests.database import database_url_of_test_db
from tests.gateway.conftest import post, status_of
from tests.gateway.test_metering import KEY, usage
from tests.polling import wait_for
from tests.ports import closed_port, free_port


def spooled_lines(directory) -> int:
    return sum(path.read_bytes().count(b"\n") for path in Path(directory).glob("*.rows"))


def test_rows_wait_on_disk_and_are_written_once_the_database_is_back(transactional_db, tenant_a, tmp_path):
    with closed_port() as port:
        writer = UsageWriter(f"postgres://postgres@127.0.0.1:{port}/none", prefix_key=KEY, spool_dir=str(tmp_path), batch_rows=2)
        for status in (200, 201, 202, 203, 204):
            usage(writer, tenant_a, status)
            assert writer.flush() is False  # each flush moves what is queued to disk, then fails to write it
    assert not writer.rows and spooled_lines(tmp_path) == 5 and len(list(tmp_path.glob("*.rows"))) == 3
    assert writer.waiting == 5 and not writer.database_ok
    writer.database_url = database_url_of_test_db()
    assert writer.flush() and writer.written == 5 and writer.waiting == 0
    assert list(UsageRow.objects.order_by("id").values_list("status", flat=True)) == [200, 201, 202, 203, 204]
    assert not list(tmp_path.glob("*.rows")) and not UsageBatch.objects.exists()


def test_a_segment_committed_before_a_crash_is_not_written_twice(transactional_db, tenant_a, tmp_path):
    spool, kept = tmp_path / "spool", tmp_path / "kept"
    with closed_port() as port:
        writer = UsageWriter(f"postgres://postgres@127.0.0.1:{port}/none", prefix_key=KEY, spool_dir=str(spool))
        for status in (200, 201, 202):
            usage(writer, tenant_a, status)
        assert writer.flush() is False
    shutil.copytree(spool, kept)
    (segment,) = kept.glob("*.rows")
    writer.database_url = database_url_of_test_db()
    assert writer.flush() and writer.written == 3 and not UsageBatch.objects.exists()
    # The state a crash leaves right after a segment's commit, before its file and marker are deleted: the
    # rows and the segment's marker (its uuid, from the file name) in the database, the same file on disk.
    shutil.copy(segment, spool / segment.name)
    UsageBatch.objects.create(id=segment.stem.split("-", 1)[1], at=timezone.now())
    # A line cut short by a crash mid-append, in a segment of its own.
    (spool / "000000000099-7b0e2a54-8f0c-4b7e-9a51-2f1f8e1f0c11.rows").write_bytes(b'["2026-12-02T05:00:00+00:00"')
    restarted = UsageWriter(writer.database_url, prefix_key=KEY, spool_dir=str(spool))
    assert restarted.waiting == 3
    assert restarted.flush() and restarted.written == 0
    assert sorted(UsageRow.objects.values_list("status", flat=True)) == [200, 201, 202]
    assert not list(spool.glob("*.rows")) and not UsageBatch.objects.exists()


def test_the_spool_bound_drops_the_oldest_rows_and_counts_them(transactional_db, tenant_a, tmp_path):
    with closed_port() as port:
        writer = UsageWriter(f"postgres://postgres@127.0.0.1:{port}/none", prefix_key=KEY, spool_dir=str(tmp_path), batch_rows=2)
        usage(writer, tenant_a, 200)
        writer.flush()
        line = spooled_lines(tmp_path) and (tmp_path / next(tmp_path.glob("*.rows")).name).stat().st_size
        writer.spool.max_bytes = 4 * line  # room for four rows of this size
        for status in (201, 202, 203, 204, 205):
            usage(writer, tenant_a, status)
            writer.flush()
    # Segments of two rows: the oldest (200, 201) went whole to make room for the fifth and sixth rows.
    assert (writer.dropped, writer.waiting, spooled_lines(tmp_path)) == (2, 4, 4)
    writer.database_url = database_url_of_test_db()
    assert writer.flush()
    assert sorted(UsageRow.objects.values_list("status", flat=True)) == [202, 203, 204, 205]


def metrics(base) -> dict[str, float]:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        return {s.name: s.value for f in text_string_to_metric_families(response.read().decode()) for s in f.samples}


def start(world, database_url, spool, *extra):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                             "--snapshot", str(world["path"]), "--database-url", database_url,
                             "--spool-dir", str(spool), "--usage-flush-seconds", "0.2", *extra])
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: status_of(f"{base}/readyz") == 200, timeout=20)
    return proc, base


def test_a_gateway_killed_while_the_database_is_down_delivers_every_row_after_restart(transactional_db, world,
                                                                                       tmp_path):
    spool = tmp_path / "spool"
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with closed_port() as port:
        proc, base = start(world, f"postgres://postgres@127.0.0.1:{port}/none", spool)
        try:
            assert [post(base, world["all"], body)[0] for _ in range(25)] == [503] * 25
            wait_for(lambda: spooled_lines(spool) == 25, message="the rows on disk")
            assert metrics(base)["gateway_usage_database_up"] == 0
        finally:
            proc.kill()  # SIGKILL: no drain, nothing flushed on the way out
            proc.wait(timeout=10)
    proc, base = start(world, database_url_of_test_db(), spool)
    try:
        wait_for(lambda: metrics(base)["gateway_usage_waiting_rows"] == 0, message="the spool replayed")
        assert metrics(base)["gateway_usage_written_rows"] == 25
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert UsageRow.objects.filter(model="chat", status=503).count() == UsageRow.objects.count() == 25
    assert not os.listdir(spool) and not UsageBatch.objects.exists()


def test_shutdown_with_the_database_down_leaves_the_rows_on_disk_for_the_next_start(transactional_db, tenant_a,
                                                                                     tmp_path):
    with closed_port() as port:
        writer = UsageWriter(f"postgres://postgres@127.0.0.1:{port}/none", prefix_key=KEY, spool_dir=str(tmp_path))
        usage(writer, tenant_a, 200)
        usage(writer, tenant_a, 201)
        writer.close()
    assert spooled_lines(tmp_path) == 2 and not writer.rows
    restarted = UsageWriter(database_url_of_test_db(), prefix_key=KEY, spool_dir=str(tmp_path))
    assert restarted.flush() and sorted(UsageRow.objects.values_list("status", flat=True)) == [200, 201]
