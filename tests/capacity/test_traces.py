"""Load traces in the public formats: what is read, and every bad row named by its line and column."""

from __future__ import annotations

import json

import pytest

from capacity.traces import TraceError, parse_trace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2000000,879,1
"""

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""


def test_azure_rows_become_arrivals_from_the_first_request_with_seven_digit_fractions():
    trace = parse_trace(AZURE.encode(), "azure")
    assert [(r.prompt_tokens, r.output_tokens) for r in trace.requests] == [(374, 44), (396, 109), (879, 1)]
    # 18:15:50.995169 - 18:15:46.680590 = 4.314579 s (the seventh digit is below a microsecond)
    assert [round(r.t, 6) for r in trace.requests] == [0.0, 4.314579, 4.51941]
    assert trace.start.isoformat() == "2023-11-16T18:15:46.680590+00:00"
    assert trace.duration_s == pytest.approx(4.51941)


def test_burstgpt_leaves_out_the_failed_requests_and_counts_them():
    trace = parse_trace(BURSTGPT, "burstgpt")
    assert [(r.t, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [(0.0, 472, 18), (113.0, 417, 276)]
    assert trace.skipped == 1
    assert trace.start is None


def test_jsonl_takes_seconds_or_iso_times_keeps_prefix_ids_and_sorts_by_arrival():
    lines = [
        {"timestamp": 100.5, "prompt_tokens": 20, "output_tokens": 5, "prefix_id": "sys-a"},
        {"timestamp": 100.0, "prompt_tokens": 10, "output_tokens": 3},
        {"timestamp": 103, "prompt_tokens": 30, "output_tokens": 7, "prefix_id": 42},
    ]
    trace = parse_trace("\n".join(json.dumps(line) for line in lines) + "\n\n", "jsonl")
    assert [(r.t, r.prompt_tokens, r.prefix_id) for r in trace.requests] == [
        (0.0, 10, None), (0.5, 20, "sys-a"), (3.0, 30, "42")]
    iso = "\n".join([
        '{"timestamp": "2024-05-10T12:00:01Z", "prompt_tokens": 8, "output_tokens": 2}',
        '{"timestamp": "2024-05-10T12:00:00.250+00:00", "prompt_tokens": 9, "output_tokens": 2}',
    ])
    assert [r.t for r in parse_trace(iso, "jsonl").requests] == [0.0, 0.75]


def test_summary_gives_the_rate_and_nearest_rank_percentiles():
    lines = [json.dumps({"timestamp": i, "prompt_tokens": 100 * (i + 1), "output_tokens": 10})
             for i in range(20)]
    summary = parse_trace("\n".join(lines), "jsonl").summary()
    # 20 requests over 19 s; prompt lengths 100..2000: p50 is the 10th (1000), p95 the 19th (1900).
    assert summary["requests"] == 20 and summary["duration_s"] == 19.0
    assert summary["rate_per_s"] == pytest.approx(20 / 19, abs=1e-3)
    assert summary["prompt_tokens"] == {"p50": 1000, "p95": 1900}
    assert summary["output_tokens"] == {"p50": 10, "p95": 10}


def problems_of(data, fmt, **limits) -> list[str]:
    with pytest.raises(TraceError) as caught:
        parse_trace(data, fmt, **limits)
    return caught.value.problems


def test_bad_azure_rows_are_named_by_line_and_column_and_nothing_is_returned():
    text = AZURE + "2023-11-16 18:16:00.1,abc,3\n16/11/2023 18:16,12,4\n2023-11-16 18:16:02,12,-1\n"
    assert problems_of(text, "azure") == [
        "line 5, column ContextTokens: 'abc' is not a whole number of tokens",
        "line 6, column TIMESTAMP: '16/11/2023 18:16' is not a date and time (e.g. 2023-11-16 18:15:46.6805900)",
        "line 7, column GeneratedTokens: -1 is outside 0–10,000,000 tokens",
    ]


def test_a_header_without_the_formats_columns_says_which_are_missing():
    assert problems_of("time,prompt,output\n1,2,3\n", "azure") == [
        "line 1: the azure format needs the columns TIMESTAMP, ContextTokens, GeneratedTokens; missing TIMESTAMP, "
        "ContextTokens, GeneratedTokens (the header has time, prompt, output)"]
    # An Azure file uploaded as BurstGPT is caught by its header, not read as nonsense.
    assert "missing Timestamp, Request tokens, Response tokens" in problems_of(AZURE, "burstgpt")[0]


def test_bad_jsonl_lines_name_the_line_and_field():
    text = "\n".join([
        '{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 2}',
        '{"timestamp": 2, "prompt_tokens": 10.5, "output_tokens": 2}',
        "not json",
        '{"timestamp": true, "prompt_tokens": 10, "output_tokens": 2}',
        '{"timestamp": 3, "prompt_tokens": 10, "output_tokens": 0}',
        '{"timestamp": 4, "prompt_tokens": 10, "output_tokens": 2, "prompt": "hi"}',
        "[1, 2]",
    ])
    assert problems_of(text, "jsonl") == [
        "line 2, column prompt_tokens: 10.5 is not a whole number of tokens",
        "line 3: not JSON (Expecting value)",
        "line 4, column timestamp: required: seconds or an ISO 8601 date and time",
        "line 5, column output_tokens: 0 is outside 1–10,000,000 tokens",
        "line 6, column prompt: unknown field (expected timestamp, prompt_tokens, output_tokens, prefix_id)",
        "line 7: must be a JSON object",
    ]


def test_many_bad_rows_are_listed_up_to_twenty_then_counted():
    text = "\n".join('{"timestamp": 1, "prompt_tokens": "x", "output_tokens": 2}' for _ in range(25))
    problems = problems_of(text, "jsonl")
    assert len(problems) == 21 and problems[-1] == "and 5 more bad rows"


def test_limits_format_and_encoding_are_refused_with_the_reason():
    assert problems_of(AZURE, "azure", max_bytes=50) == [f"the trace is {len(AZURE):,} bytes, over the limit of 50"]
    assert problems_of(AZURE, "azure", max_rows=2) == ["the trace has 3 requests, over the limit of 2"]
    assert problems_of(AZURE, "splitwise") == ["unknown format 'splitwise'; use one of azure, burstgpt, jsonl"]
    assert problems_of(b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff,1,1\n", "azure") == ["not UTF-8 text (byte 40)"]
    assert problems_of("TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure") == ["the trace has no requests"]
