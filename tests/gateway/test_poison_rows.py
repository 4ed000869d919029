"""Usage rows no request can make unwritable (issue 45, findings 1 and 2), through the usage writer against the
test database: text columns made valid before they are queued, a prompt that cannot be hashed costing its row
only the prompt's columns, and rows the database refuses set aside after MAX_TRIES (in memory and from the
spool, where replay stays exactly once across a crash) while every other row is written."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime

import pytest

from apps.gateway.models import UsageBatch, UsageRow
from gateway.metering import COLUMNS, UsageWriter
from gateway.prefix import Prompt
from gateway.spool import DEAD_LETTER, MAX_TRIES
from tests.database import database_url_of_test_db
from tests.gateway.test_metering import KEY

AT = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)


def fields(tenant_id: int, status: int, **extra) -> dict:
    """A usage row's columns by name (what the gateway records for one request)."""
    return {"at": AT, "tenant_id": tenant_id, "key_id": 9, "service_id": None, "model": "chat", "pod": "",
            "status": status, "prompt_tokens": 11, "cached_tokens": 4, "completion_tokens": 3, "ttft_ms": None,
            "duration_ms": 1.5, "streamed": False, "disconnected": False, **extra}


def spooled(values: dict) -> bytes:
    """A row as a spool segment's line (gateway/spool.py): its columns' values in order, `at` in ISO form."""
    return json.dumps([values.get(name) for name in COLUMNS], default=datetime.isoformat).encode() + b"\n"


def writer(spool=None) -> UsageWriter:
    return UsageWriter(database_url_of_test_db(), prefix_key=KEY, spool_dir=str(spool) if spool else None)


def statuses() -> list[int]:
    return sorted(UsageRow.objects.values_list("status", flat=True))


@pytest.mark.parametrize("spooled_dir", [False, True], ids=["in-memory", "spool-on-disk"])
def test_text_columns_are_made_valid_and_bounded_before_they_are_queued(transactional_db, tenant_a, tmp_path,
                                                                         spooled_dir):
    usage = writer(tmp_path / "spool" if spooled_dir else None)
    sent = {200: "\ud800", 201: "a\x00b", 202: "m" * 1000, 203: "\ud83d\ude00 ok"}
    for status, model in sent.items():
        usage.record(**fields(tenant_a.pk, status, model=model, pod="pod\x00-0"))
    assert usage.flush() and usage.quarantined == 0
    # A lone surrogate and a NUL become U+FFFD, a surrogate pair its character, a long name its first 200.
    assert dict(UsageRow.objects.values_list("status", "model")) == {
        200: "\ufffd", 201: "a\ufffdb", 202: "m" * 200, 203: "\U0001f600 ok"}
    assert set(UsageRow.objects.values_list("pod", flat=True)) == {"pod\ufffd-0"}


@pytest.mark.parametrize("spooled_dir", [False, True], ids=["in-memory", "spool-on-disk"])
def test_a_prompt_that_cannot_be_hashed_costs_its_row_only_the_prompt_columns(transactional_db, tenant_a, tenant_b,
                                                                               tmp_path, spooled_dir):
    usage = writer(tmp_path / "spool" if spooled_dir else None)
    good = Prompt({"prompt": "y" * 130}, "prompt")  # two full 64-character chunks
    prompts = {200: good, 201: Prompt({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
                                      "messages"),
               202: good, 203: Prompt({"messages": [{"role": "user", "content": "\ud800" + "hello " * 20}]}, "messages"),
               204: good, 205: Prompt(["not", "a", "body"], "messages"), 206: good}
    for status, prompt in prompts.items():
        usage.record(**fields((tenant_a if status % 2 else tenant_b).pk, status, prefix_blocks=prompt))
    assert usage.flush() and usage.waiting == 0
    rows = {r.status: r for r in UsageRow.objects.all()}
    assert sorted(rows) == list(prompts)  # every row, both tenants', written
    assert all((r.prompt_tokens, r.completion_tokens) == (11, 3) for r in rows.values())
    assert all((rows[s].prompt_chars, len(rows[s].prefix_blocks)) == (130, 2) for s in (200, 202, 204, 206))
    # A text part whose text is not a string is no text: the role and two newlines are left.
    assert (rows[201].prompt_chars, rows[201].prefix_blocks) == (len("user\n\n"), [])
    # A lone surrogate cannot be hashed, nor can a body that is not an object: counts kept, prompt columns not.
    assert [(rows[s].prompt_chars, rows[s].prefix_blocks) for s in (203, 205)] == [(None, None)] * 2
    assert usage.unprepared == 2


def test_a_batch_the_database_refuses_is_written_row_by_row_and_the_refused_rows_set_aside(
        transactional_db, tenant_a, tenant_b, caplog):
    usage = writer()
    gone = tenant_b.pk + 1000  # a tenant deleted since the gateway's snapshot: its row breaks the foreign key
    for status, tenant_id in ((200, tenant_a.pk), (201, tenant_b.pk), (202, gone), (203, tenant_a.pk)):
        usage.record(**fields(tenant_id, status))
    for _ in range(MAX_TRIES - 1):
        assert usage.flush() is False
        assert (usage.up, usage.health(), usage.waiting, usage.stuck) == (False, "behind", 4, False)
    with caplog.at_level(logging.ERROR, logger="gateway.spool"):
        assert usage.flush()
    assert statuses() == [200, 201, 203]
    assert (usage.quarantined, usage.waiting, usage.written, usage.health()) == (1, 0, 3, "ok")
    assert "ForeignKeyViolation" in caplog.text and "usage row set aside" in caplog.text


def test_a_spool_segment_holding_rows_the_database_refuses_is_quarantined_and_the_rest_written(
        transactional_db, tenant_a, tenant_b, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    # As an older gateway spooled them: a NUL and a lone surrogate in `model`, and a line that is no row.
    lines = [spooled(fields(tenant_a.pk, 200)), spooled(fields(tenant_a.pk, 201, model="a\x00b")),
             spooled(fields(tenant_b.pk, 202)), spooled(fields(tenant_b.pk, 203, model="\ud800")),
             spooled(fields(tenant_a.pk, 204)), b'{"not": "a row"}\n']
    (spool / f"000000000001-{uuid.uuid4()}.rows").write_bytes(b"".join(lines))
    later = spool / f"000000000002-{uuid.uuid4()}.rows"
    later.write_bytes(spooled(fields(tenant_b.pk, 205)))
    usage = writer(spool)
    assert usage.waiting == 7
    for _ in range(MAX_TRIES - 1):
        assert usage.flush() is False and usage.health() == "behind" and not UsageRow.objects.exists()
    assert usage.flush()
    assert statuses() == [200, 202, 204, 205]  # the later segment is no longer held back either
    dead = [json.loads(line) for line in (spool / DEAD_LETTER).read_text().splitlines()]
    assert [(d["line"], d["reason"].split(":")[0]) for d in dead] == [
        (1, "DataError"), (3, "UnicodeEncodeError"), (5, "unreadable")]
    assert [d["row"]["model"] for d in dead[:2]] == ["a\x00b", "\ud800"] and dead[2]["row"] == '{"not": "a row"}'
    assert all(d["at"] and d["segment"] for d in dead)
    assert (usage.quarantined, usage.written, usage.waiting, usage.up) == (3, 4, 0, True)
    assert sorted(p.name for p in spool.iterdir()) == [DEAD_LETTER] and not UsageBatch.objects.exists()


def test_a_crash_while_a_segment_is_written_row_by_row_writes_no_row_twice(transactional_db, tenant_a, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    segment = uuid.uuid4()
    rows = [fields(tenant_a.pk, 200), fields(tenant_a.pk, 201, model="a\x00b"), fields(tenant_a.pk, 202)]
    (spool / f"000000000001-{segment}.rowwise").write_bytes(b"".join(spooled(r) for r in rows))
    # The state a crash leaves after the first row's transaction: that row and its marker (a uuid5 of the
    # segment's id and the row's line) committed, the segment's file still there.
    UsageRow.objects.create(**rows[0])
    UsageBatch.objects.create(id=uuid.uuid5(segment, "0"), at=AT)
    usage = writer(spool)
    assert usage.flush()  # row by row at once: the file says so
    assert statuses() == [200, 202] and usage.written == 1 and usage.quarantined == 1
    assert not list(spool.glob("*.row*")) and not UsageBatch.objects.exists()
