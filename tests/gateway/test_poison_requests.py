"""Issue 45's poison requests and rows against a gateway process metering into PostgreSQL: mixed with two
tenants' good requests they stop no row and erase none; a spool segment holding rows the database refuses is
quarantined to the dead-letter file and the rest written; rows failing for a reason no row is to blame for
show as stuck in /metrics and /readyz (which stays 200) and are written once the database takes them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest
from django.db import connection

from apps.gateway.models import UsageRow
from gateway.spool import DEAD_LETTER
from tests.database import database_url_of_test_db
from tests.gateway.fake_engine import USAGE, engine_in_thread
from tests.gateway.test_no_usage_lost import serve_chat_from, start
from tests.gateway.test_poison_rows import fields, spooled
from tests.gateway.test_spool import metrics
from tests.polling import wait_for

CHAT = {"role": "user", "content": "hi"}


def call(base: str, key: str, path: str, body: dict) -> int:
    """The status of a POST of `body` (JSON, non-ASCII escaped: a lone surrogate travels as \\ud800)."""
    request = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def readyz(base: str) -> tuple[int, dict]:
    with urllib.request.urlopen(f"{base}/readyz", timeout=5) as response:
        return response.status, json.loads(response.read())


def stop(proc) -> None:
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("spool", [False, True], ids=["in-memory", "spool-on-disk"])
def test_poison_requests_stop_and_erase_no_other_tenants_rows(transactional_db, world, tenant_a, tenant_b, tmp_path,
                                                              spool):
    good_a = ("/v1/completions", world["all"], {"model": "chat", "prompt": "y" * 130, "max_tokens": 3})
    good_b = ("/v1/chat/completions", world["bravo"], {"model": "secret-b", "messages": [CHAT]})  # 503: no replica
    poison = [("/v1/chat/completions", world["all"], {"model": "\ud800", "messages": [CHAT]}),
              ("/v1/chat/completions", world["all"], {"model": "a\x00b", "messages": [CHAT]}),
              ("/v1/chat/completions", world["all"],
               {"model": "chat", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}),
              ("/v1/completions", world["all"], {"model": "chat", "prompt": "\ud800" + "hello " * 20})]
    extra = ["--spool-dir", str(tmp_path / "spool")] if spool else []
    with engine_in_thread() as engine_port:
        serve_chat_from(world, tenant_a, engine_port)
        proc, _, base = start(world, "--database-url", database_url_of_test_db(), "--usage-flush-seconds", "0.2",
                              *extra)
        try:
            for bad in poison:  # each poison request among good ones of both tenants
                for path, key, body in (good_a, bad, good_b, good_a, good_b):
                    call(base, key, path, body)
            good = UsageRow.objects.filter(model__in=("chat", "secret-b"), prompt_chars__in=(130, len("user\nhi\n")))
            wait_for(lambda: good.count() == 16, message="every good request's row")
            wait_for(lambda: metrics(base)["gateway_usage_waiting_rows"] == 0, message="nothing left waiting")
            seen = metrics(base)
            assert readyz(base) == (200, {"snapshot_loaded": True, "metering": "ok"})
        finally:
            stop(proc)
    assert good.filter(tenant=tenant_a, status=200, prompt_tokens=USAGE["prompt_tokens"]).count() == 8
    assert good.filter(tenant=tenant_b, status=503).count() == 8
    # The prompt poisons: written with their counts, the lone surrogate's without the prompt's columns.
    unhashable = UsageRow.objects.get(prompt_chars=None, status=200)
    assert (unhashable.tenant_id, unhashable.prompt_tokens, unhashable.completion_tokens, unhashable.prefix_blocks) \
        == (tenant_a.pk, USAGE["prompt_tokens"], USAGE["completion_tokens"], None)
    assert UsageRow.objects.get(prompt_chars=len("user\n\n")).prefix_blocks == []
    # A `model` that is no name is refused at the door (400) and metered without it: one row each, model "".
    assert sorted(UsageRow.objects.filter(model="").values_list("status", flat=True)) == [400, 400]
    assert set(UsageRow.objects.values_list("model", flat=True)) == {"chat", "secret-b", ""}
    assert (seen["gateway_usage_unprepared_rows"], seen["gateway_usage_quarantined_rows"],
            seen["gateway_usage_database_up"], seen["gateway_usage_stuck"]) == (1, 0, 1, 0)
    assert seen["gateway_usage_written_rows"] == UsageRow.objects.count()


def test_a_gateway_quarantines_a_spooled_segment_the_database_refuses_and_writes_the_rest(transactional_db, world,
                                                                                           tenant_a, tenant_b,
                                                                                           tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    # Left by an older gateway that spooled whatever `model` a request carried.
    lines = [fields(tenant_a.pk, 200), fields(tenant_b.pk, 201, model="a\x00b"), fields(tenant_b.pk, 202),
             fields(tenant_a.pk, 203, model="\ud800"), fields(tenant_b.pk, 204)]
    (spool / f"000000000001-{uuid.uuid4()}.rows").write_bytes(b"".join(spooled(line) for line in lines))
    proc, _, base = start(world, "--database-url", database_url_of_test_db(), "--usage-flush-seconds", "0.2",
                          "--spool-dir", str(spool))
    try:
        # Requests made meanwhile wait behind the segment, then go in too.
        assert call(base, world["bravo"], "/v1/chat/completions", {"model": "secret-b", "messages": [CHAT]}) == 503
        wait_for(lambda: metrics(base)["gateway_usage_waiting_rows"] == 0, message="the spool written")
        seen = metrics(base)
        assert readyz(base)[1]["metering"] == "ok"
    finally:
        stop(proc)
    assert sorted(UsageRow.objects.values_list("status", flat=True)) == [200, 202, 204, 503]
    dead = [json.loads(line) for line in (spool / DEAD_LETTER).read_text().splitlines()]
    assert [(d["row"]["status"], d["row"]["model"], d["reason"].split(":")[0]) for d in dead] == [
        (201, "a\x00b", "DataError"), (203, "\ud800", "UnicodeEncodeError")]
    assert (seen["gateway_usage_quarantined_rows"], seen["gateway_usage_written_rows"],
            seen["gateway_usage_database_up"]) == (2, 4, 1)


@pytest.fixture
def role_without_insert(transactional_db):
    """A database role that may connect and read the usage table but not insert into it (a grant forgotten)."""
    name, password = f"meter_{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        cursor.execute(f"GRANT SELECT ON gateway_usagerow TO {name}")
    s = connection.settings_dict
    yield name, f"postgres://{name}:{password}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP OWNED BY {name}")
        cursor.execute(f"DROP ROLE {name}")


def test_rows_failing_for_a_reason_no_row_is_to_blame_for_are_stuck_not_set_aside(transactional_db, world,
                                                                                    role_without_insert):
    role, url = role_without_insert
    proc, _, base = start(world, "--database-url", url, "--usage-flush-seconds", "0.2")
    body = {"model": "chat", "messages": [CHAT]}
    try:
        assert [call(base, world["all"], "/v1/chat/completions", body) for _ in range(3)] == [503] * 3
        wait_for(lambda: metrics(base)["gateway_usage_stuck"] == 1, message="metering stuck")
        seen = metrics(base)
        # Reported, not a reason to take the replica out of service: its requests are still served.
        assert readyz(base) == (200, {"snapshot_loaded": True, "metering": "stuck"})
        with connection.cursor() as cursor:
            cursor.execute(f"GRANT INSERT ON gateway_usagerow TO {role}")
        wait_for(lambda: metrics(base)["gateway_usage_waiting_rows"] == 0, message="the rows written")
        after = metrics(base)
        assert readyz(base)[1]["metering"] == "ok"
    finally:
        stop(proc)
    assert (seen["gateway_usage_database_up"], seen["gateway_usage_waiting_rows"],
            seen["gateway_usage_quarantined_rows"]) == (0, 3, 0)
    assert (after["gateway_usage_stuck"], after["gateway_usage_database_up"], after["gateway_usage_written_rows"]) \
        == (0, 1, 3)
    assert UsageRow.objects.filter(status=503).count() == 3
