"""A batch through the official openai client against a gateway process and kubesim's simulated vLLM engines:
every request line answered by an engine, the malformed one in the error file with its line number, and what
the batch and its usage rows count agreeing with the engines' own token counters."""

from __future__ import annotations

import json

from apps.gateway.models import UsageRow
from tests.gateway.conftest import client
from tests.gateway.test_forwarding import engine_counters
from tests.polling import wait_for


def test_a_batch_on_kubesims_engines_is_answered_and_metered_as_the_engines_count(gateway, served):
    before = engine_counters(served["endpoints"])
    lines = [json.dumps({"custom_id": f"doc-{n}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "chat", "max_tokens": 8,
                                  "messages": [{"role": "user", "content": f"Summarise document {n}."}]}})
             for n in range(5)]
    lines.insert(2, '{"custom_id": "broken", "method": "POST"')  # line 3: cut short
    api = client(gateway, served["key"])
    uploaded = api.files.create(file=("docs.jsonl", "\n".join(lines).encode()), purpose="batch")
    batch = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_for(lambda: (b := api.batches.retrieve(batch.id)).status == "completed" and b, timeout=60,
                    message="the batch completed")

    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 5, 1)
    output = [json.loads(line) for line in api.files.content(done.output_file_id).text.splitlines()]
    assert [o["custom_id"] for o in output] == [f"doc-{n}" for n in range(5)]
    assert all(o["response"]["body"]["choices"][0]["message"]["content"] for o in output)
    [error] = [json.loads(line) for line in api.files.content(done.error_file_id).text.splitlines()]
    assert (error["error"]["line"], error["response"]) == (3, None)

    rows = wait_for(lambda: len(r := list(UsageRow.objects.filter(batch_id=batch.id))) == 5 and r,
                    message="the batch's usage rows")
    after = engine_counters(served["endpoints"])
    prompt = after["vllm:prompt_tokens_total"] - before.get("vllm:prompt_tokens_total", 0)
    generated = after["vllm:generation_tokens_total"] - before.get("vllm:generation_tokens_total", 0)
    assert sum(r.prompt_tokens for r in rows) == done.usage.input_tokens == prompt > 0
    assert sum(r.completion_tokens for r in rows) == done.usage.output_tokens == generated > 0
    assert {r.key_id for r in rows} == {served["key_id"]}
