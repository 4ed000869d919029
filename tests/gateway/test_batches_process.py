"""OpenAI's Files and Batch API at a real gateway process, through the official openai client: a batch run end
to end against the tests' engine (a malformed line and a line for another endpoint in the error file with their
line numbers, the rest answered and metered to the key as batch usage), a cancel, bad input, and another
tenant's files and batches answering 404."""

from __future__ import annotations

import json

import openai
import pytest

from apps.gateway.models import Batch, BatchLine, File, InferenceKey, UsageRow
from tests.database import database_url_of_test_db
from tests.gateway.conftest import client
from tests.gateway.fake_engine import SEEN, USAGE, engine_in_thread
from tests.gateway.test_no_usage_lost import serve_chat_from, start
from tests.polling import wait_for


def request_line(custom_id: str, prompt: str, model: str = "chat", url: str = "/v1/completions") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url,
                       "body": {"model": model, "prompt": prompt, "max_tokens": 3}})


@pytest.fixture
def gateway(transactional_db, world, tenant_a):
    """A gateway process metering into the test database (so serving files and batches), `chat` served by the
    tests' engine; its base URL."""
    with engine_in_thread() as engine_port:
        serve_chat_from(world, tenant_a, engine_port)
        proc, _, base = start(world, "--database-url", database_url_of_test_db(), "--usage-flush-seconds", "0.2",
                              "--batch-lease-seconds", "3")
        try:
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def settled(api: openai.OpenAI, batch_id: str, status: str):
    """The batch once it has reached `status`."""
    return wait_for(lambda: (b := api.batches.retrieve(batch_id)).status == status and b, timeout=30,
                    message=f"batch {batch_id} {status}")


def test_a_batch_runs_each_line_through_the_gateway_and_files_the_bad_ones_by_line(gateway, world):
    api = client(gateway, world["all"])
    lines = [request_line("a", "batch one"), request_line("b", "batch two"), "{not json",
             request_line("d", "batch four", url="/v1/chat/completions"), request_line("e", "batch five")]
    uploaded = api.files.create(file=("nightly.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch")
    assert (uploaded.purpose, uploaded.filename, uploaded.bytes) == ("batch", "nightly.jsonl",
                                                                     len("\n".join(lines)) + 1)
    assert api.files.retrieve(uploaded.id).id == uploaded.id
    batch = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h",
                               metadata={"job": "nightly"})
    assert (batch.status, batch.metadata, batch.request_counts.total) == ("validating", {"job": "nightly"}, 5)
    assert batch.expires_at - batch.created_at == 24 * 3600

    done = settled(api, batch.id, "completed")
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 2)
    output = [json.loads(line) for line in api.files.content(done.output_file_id).text.splitlines()]
    assert [o["custom_id"] for o in output] == ["a", "b", "e"]
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in output)
    assert output[0]["response"]["body"]["usage"]["prompt_tokens"] == USAGE["prompt_tokens"]
    errors = [json.loads(line) for line in api.files.content(done.error_file_id).text.splitlines()]
    assert [(e["custom_id"], e["error"]["line"], e["error"]["param"]) for e in errors] == [(None, 3, None),
                                                                                             ("d", 4, "url")]
    # The engine saw the three requests, nothing of the refused lines.
    assert sorted(s["prompt"] for s in SEEN if s["prompt"].startswith("batch")) == ["batch five", "batch one",
                                                                                    "batch two"]
    assert done.usage.input_tokens == 3 * USAGE["prompt_tokens"]
    # Each line is metered to the key that created the batch, marked as the batch's.
    key_id = InferenceKey.objects.get(name="all").pk
    rows = wait_for(lambda: len(r := list(UsageRow.objects.filter(batch_id=batch.id))) == 3 and r,
                    message="the batch's usage rows")
    assert {(r.key_id, r.status, r.prompt_tokens, r.completion_tokens) for r in rows} == {
        (key_id, 200, USAGE["prompt_tokens"], USAGE["completion_tokens"])}
    assert not BatchLine.objects.filter(batch_id=batch.id).exists()  # folded into the two files
    assert [b.id for b in api.batches.list()] == [batch.id]


def test_a_cancelled_batch_stops_and_sends_nothing_more(gateway, world):
    api = client(gateway, world["all"])
    # `embed` has no ready engine: its lines wait for spare capacity, which never comes.
    content = "\n".join(request_line(f"w{n}", f"waiting {n}", model="embed") for n in range(20)).encode()
    uploaded = api.files.create(file=("wait.jsonl", content), purpose="batch")
    batch = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")
    settled(api, batch.id, "in_progress")
    with pytest.raises(openai.ConflictError) as caught:  # the input of a batch still running is kept
        api.files.delete(uploaded.id)
    assert caught.value.body["param"] == "file_id"
    assert api.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    cancelled = settled(api, batch.id, "cancelled")
    assert cancelled.cancelled_at is not None and cancelled.output_file_id is None
    assert not [s for s in SEEN if str(s.get("prompt")).startswith("waiting")]
    assert not UsageRow.objects.filter(batch_id=batch.id).exists()
    assert api.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        api.files.retrieve(uploaded.id)


def test_another_tenants_files_and_batches_are_404(gateway, world):
    own = client(gateway, world["all"])
    # Lines for `embed`, which has no engine: the batch stays in progress, so a cancel would still change it.
    uploaded = own.files.create(file=("mine.jsonl", request_line("x", "mine", model="embed").encode()),
                                purpose="batch")
    batch = own.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")
    other = client(gateway, world["bravo"])
    for call in (lambda: other.files.retrieve(uploaded.id), lambda: other.files.content(uploaded.id),
                 lambda: other.files.delete(uploaded.id), lambda: other.batches.retrieve(batch.id),
                 lambda: other.batches.cancel(batch.id),
                 lambda: other.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions",
                                              completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert list(other.files.list()) == [] and list(other.batches.list()) == []
    assert File.objects.filter(pk=uploaded.id).exists()
    assert Batch.objects.get(pk=batch.id).status != "cancelling"


@pytest.mark.parametrize(("call", "param"), [
    (lambda api, f: api.files.create(file=("x.jsonl", b'{"a": 1}\n'), purpose="assistants"), "purpose"),
    (lambda api, f: api.files.create(file=("x.jsonl", b"  \n"), purpose="batch"), "file"),
    (lambda api, f: api.batches.create(input_file_id=f, endpoint="/v1/embeddings", completion_window="24h"),
     "endpoint"),
    (lambda api, f: api.batches.create(input_file_id=f, endpoint="/v1/completions", completion_window="48h"),
     "completion_window"),
    (lambda api, f: api.batches.create(input_file_id=f, endpoint="/v1/completions", completion_window="24h",
                                       metadata={"k" * 65: "v"}), "metadata"),
    (lambda api, f: api.batches.list(limit=0), "limit"),
], ids=["purpose", "empty-file", "endpoint", "window", "metadata", "limit"])
def test_bad_input_is_a_400_naming_the_field_and_keeps_nothing(gateway, world, call, param):
    api = client(gateway, world["all"])
    good = api.files.create(file=("ok.jsonl", request_line("x", "ok").encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError) as caught:
        call(api, good.id)
    assert caught.value.body["param"] == param
    assert File.objects.count() == 1 and not Batch.objects.exists()
