"""Load traces in the public formats: what is read, and every bad row named by its line and column."""

from __future__ import annotations

import json
from datetime import UTC, datetime

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


NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def rows(*stamps) -> str:
    return "\n".join(json.dumps({"timestamp": s, "prompt_tokens": 10, "output_tokens": 2}) for s in stamps)


def test_timestamps_outside_the_window_are_refused_by_line():
    # Before 2000, after a day from now, not finite, negative seconds, and past the Unix time a day from now.
    text = rows("2024-05-10T12:00:00Z", "0001-01-01T00:00:00", "9999-12-31T23:59:59+05:00", "2025-03-02T12:00:01Z",
                "1999-12-31T23:59:59Z") + '\n{"timestamp": 1e400, "prompt_tokens": 1, "output_tokens": 1}\n' + \
        rows(-1, 1e308, NOW.timestamp() + 86401)
    problems = problems_of(text, "jsonl", now=NOW)
    assert [p.split(":")[0] for p in problems] == [f"line {n}, column timestamp" for n in range(2, 10)]
    assert all("2000-01-01 to 2025-03-02 12:00 UTC" in p for p in problems[:4])
    # 2025-03-02 12:00 UTC is 1,740,916,800 s after the epoch.
    assert all("from 0 to 1740916800 seconds" in p for p in problems[4:])


def test_the_edges_of_the_window_are_accepted():
    trace = parse_trace(rows("2000-01-01T00:00:00Z", "2000-01-01T00:00:01Z"), "jsonl", now=NOW)
    assert [r.t for r in trace.requests] == [0.0, 1.0]
    assert parse_trace(rows(0), "jsonl", now=NOW).requests and parse_trace(rows(1740916800), "jsonl", now=NOW).requests
    assert len(parse_trace(rows(1740916800 - 7 * 86400, 1740916800), "jsonl", now=NOW).requests) == 2


def test_a_trace_spans_at_most_a_week_and_the_rows_past_it_are_named():
    week = 7 * 86400
    text = rows(100, 100 + week, 100 + week + 1, 50 + 10 * 86400)
    assert problems_of(text, "jsonl", now=NOW) == [
        "line 3, column timestamp: 7.0 days after the first arrival (line 1); a trace spans at most 7 days",
        "line 4, column timestamp: 10.0 days after the first arrival (line 1); a trace spans at most 7 days"]
    azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-20 00:00:00,5,5\n2024-05-10 00:00:00,5,5\n"
    assert problems_of(azure, "azure", now=NOW) == [
        "line 2, column TIMESTAMP: 10.0 days after the first arrival (line 3); a trace spans at most 7 days"]


def test_deeply_nested_json_is_a_bad_line_and_nested_fields_are_not_quoted_back():
    text = rows(1) + "\n" + "[" * 10_000 + "\n" + json.dumps(
        {"timestamp": 2, "prompt_tokens": json.loads("[" * 600 + "]" * 600), "output_tokens": 1})
    assert problems_of(text, "jsonl") == ["line 2: not JSON this parser reads (nested too deeply)",
                                          "line 3, column prompt_tokens: an array is not a whole number of tokens"]


def test_a_csv_field_past_the_csv_modules_limit_names_its_line():
    text = BURSTGPT + "130,GPT-4," + "9" * 200_000 + ",5,5,API log\n"
    assert problems_of(text, "burstgpt") == [
        "line 5: not CSV that can be read (field larger than field limit (131072))"]
