"""The prompt's prefix blocks the gateway keeps on each usage row (gateway/prefix.py), for the service's reuse
curve: equal leading text, equal leading hashes; through a real gateway forwarding to kubesim's engines."""

from __future__ import annotations

import hashlib

import pytest

from apps.gateway.models import UsageRow
from gateway.metering import COLUMNS, UsageWriter
from gateway.prefix import MAX_BLOCKS, Prompt, prefix_blocks, prompt_text
from tests.database import database_url_of_test_db
from tests.gateway.conftest import client
from tests.gateway.served import serve_on_kubesim, start_gateway
from tests.gateway.test_metering import KEY
from tests.polling import wait_for
from tests.ports import closed_port

SYSTEM = "You answer questions about the attached handbook. " * 6  # 306 characters


def test_the_text_is_each_messages_role_and_text_parts_in_order():
    body = {"messages": [{"role": "system", "content": "ab"},
                         {"role": "user", "content": [{"type": "text", "text": "c"},
                                                      {"type": "image_url", "image_url": {"url": "x"}},
                                                      {"type": "text", "text": "d"}]}]}
    assert prompt_text(body, "messages") == "system\nab\nuser\ncd\n"
    assert prompt_text({"prompt": "hello"}, "prompt") == "hello"
    assert prompt_text({"prompt": ["hello"]}, "prompt") == "hello"
    assert prompt_text({"prompt": [1, 2, 3]}, "prompt") is None  # token ids: not text
    assert prompt_text({"messages": "hi"}, "messages") is None


def test_blocks_chain_every_full_chunk_and_stop_at_the_bound():
    text = "x" * 64 + "y" * 64 + "z" * 10
    first = hashlib.blake2b(b"x" * 64, digest_size=4, key=KEY).digest()
    second = hashlib.blake2b(first + b"y" * 64, digest_size=4, key=KEY).digest()
    assert prefix_blocks(text, KEY) == [int.from_bytes(first, "big", signed=True),
                                   int.from_bytes(second, "big", signed=True)]  # the partial chunk is not a block
    # The same second chunk after a different first one is another block (the chain).
    assert prefix_blocks("w" * 64 + "y" * 64, KEY)[1] != prefix_blocks(text, KEY)[1]
    assert len(prefix_blocks("a" * 64 * (MAX_BLOCKS + 5), KEY)) == MAX_BLOCKS


@pytest.fixture
def gateway(make_cluster, transactional_db, tenant_a, tmp_path):
    served = serve_on_kubesim(make_cluster, tenant_a, tmp_path)
    proc, base = start_gateway(served)
    yield base, served
    proc.terminate()
    proc.wait(timeout=30)


def test_two_questions_on_one_system_prompt_share_its_blocks_on_their_usage_rows(gateway):
    base, served = gateway
    api = client(base, served["key"])
    for question in ("What does chapter one say?", "Who wrote the foreword?"):
        api.chat.completions.create(model="chat", max_tokens=4, messages=[
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
    wait_for(lambda: UsageRow.objects.count() >= 2, message="two usage rows")

    first, second = UsageRow.objects.order_by("at")
    text = f"system\n{SYSTEM}\nuser\nWhat does chapter one say?\n"
    assert first.prompt_chars == len(text) and first.prompt_tokens > 0
    assert first.prefix_blocks == prefix_blocks(text, KEY)
    shared = len(f"system\n{SYSTEM}\nuser\n") // 64  # chunks wholly inside the common beginning
    assert first.prefix_blocks[:shared] == second.prefix_blocks[:shared]
    assert first.prefix_blocks[shared:] != second.prefix_blocks[shared:]


@pytest.mark.parametrize("spooled", [False, True], ids=["in-memory", "spool-on-disk"])
def test_the_writer_hashes_prompts_off_the_request_path_even_while_the_database_is_down(transactional_db, tenant_a,
                                                                                         tmp_path, spooled):
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi?"}]}
    text = prompt_text(body, "messages")
    with closed_port() as port:
        writer = UsageWriter(f"postgres://postgres@127.0.0.1:{port}/none", prefix_key=KEY,
                             spool_dir=str(tmp_path / "spool") if spooled else None)
        writer.record(tenant_id=tenant_a.pk, key_id=1, service_id=7, model="chat", pod="p", status=200,
                      prompt_tokens=70, cached_tokens=0, completion_tokens=4, ttft_ms=12.0, duration_ms=20.0,
                      streamed=True, disconnected=False, prefix_blocks=Prompt(body, "messages"))
        assert writer.flush() is False
    if not spooled:  # what waits in memory is the hashes, not the request's body
        [queued] = writer.rows
        assert queued[COLUMNS.index("prompt_chars")] == len(text)
        assert queued[COLUMNS.index("prefix_blocks")] == prefix_blocks(text, KEY)
    writer.database_url = database_url_of_test_db()
    assert writer.flush()
    row = UsageRow.objects.get()
    assert (row.prompt_chars, row.prefix_blocks) == (len(text), prefix_blocks(text, KEY))


def test_a_row_recorded_while_the_spool_replays_is_hashed_before_it_is_copied(transactional_db, tenant_a, tmp_path):
    # The gateway's flush thread replays the spool while requests keep being recorded: a row that arrives
    # then is copied from memory, and its prompt must be hashed first (make demo's log once said "cannot
    # adapt type 'Prompt'" and kept such rows back for a flush).
    body = {"messages": [{"role": "user", "content": SYSTEM}]}
    text = prompt_text(body, "messages")
    writer = UsageWriter(database_url_of_test_db(), prefix_key=KEY, spool_dir=str(tmp_path / "spool"))
    row = dict(tenant_id=tenant_a.pk, key_id=1, service_id=7, model="chat", pod="p", status=200, prompt_tokens=70,
               cached_tokens=0, completion_tokens=4, ttft_ms=12.0, duration_ms=20.0, streamed=True,
               disconnected=False)
    writer.record(**row, prefix_blocks=Prompt(body, "messages"))
    replay = writer.spool.replay

    def replay_while_a_request_ends(database_url):
        writer.record(**row, prefix_blocks=Prompt(body, "messages"))
        replay(database_url)

    writer.spool.replay = replay_while_a_request_ends

    assert writer.flush() is True
    assert writer.database_ok and writer.waiting == 0
    assert [(r.prompt_chars, r.prefix_blocks) for r in UsageRow.objects.all()] == [(len(text), prefix_blocks(text, KEY))] * 2
