"""The figures the autoscaler's queue and backlog signals read, from hand-written expositions: the queue-time
histogram's p95, requests finished per second, the p95 of the prompts' lengths, and the prompt tokens waiting
(requests waiting × the mean prompt of the interval's finished requests, from the histogram's sum and count).
Each expected value is worked by hand in its comment."""

from __future__ import annotations

import json

import pytest

from apps.telemetry.exposition import Snapshot, parse_snapshot
from apps.telemetry.figures import figures, figures_from_increments, increments, merge_increments
from tests.telemetry import expositions as ex


def vllm_interval(waiting=3.0, created_after=1.7e9):
    """10 requests finished in 5 s: 8 prompts of 1,500 tokens and 2 of 4,000; 9 waited under 0.3 s, one
    between 1 and 1.5 s."""
    prev = parse_snapshot(ex.vllm(prompt_lengths={}, prompt_sum=0.0, success={"stop": 0}), 100.0)
    cur = parse_snapshot(ex.vllm(prompt_lengths={2000: 8, 5000: 10}, prompt_sum=8 * 1500 + 2 * 4000,
                                 queue={0.3: 9, 1.5: 10}, success={"stop": 9, "length": 1}, waiting=waiting,
                                 created=created_after), 105.0)
    return prev, cur


def test_vllm_queue_time_requests_prompt_lengths_and_waiting_prompt_tokens():
    got = figures(*vllm_interval())
    # Queue time: rank 0.95 × 10 = 9.5 falls in (1, 1.5] holding 1 observation after 9: 1 + 0.5 × 0.5 = 1.25 s.
    assert got.queue_time_p95_s == pytest.approx(1.25)
    # 10 finished (9 stop + 1 length) in 5 s.
    assert got.requests_per_s == pytest.approx(2.0)
    # Prompts: rank 9.5 in (2000, 5000] holding 2 after 8: 2000 + 3000 × 1.5 / 2 = 4250 tokens.
    assert got.prompt_tokens_p95 == pytest.approx(4250.0)
    # Mean prompt 20,000 / 10 = 2,000 tokens; 3 waiting → 6,000 prompt tokens not yet prefilled.
    assert got.waiting_prompt_tokens == pytest.approx(6000.0)


def test_nothing_waiting_is_zero_prompt_tokens_waiting_even_with_no_request_finished():
    text = ex.vllm(waiting=0.0)
    got = figures(parse_snapshot(text, 0.0), parse_snapshot(text, 5.0))
    assert got.waiting_prompt_tokens == 0.0
    assert got.queue_time_p95_s is None and got.prompt_tokens_p95 is None and got.requests_per_s == 0.0


def test_requests_waiting_with_none_finished_leave_the_waiting_tokens_unknown():
    text = ex.vllm(waiting=4.0)
    got = figures(parse_snapshot(text, 0.0), parse_snapshot(text, 5.0))
    assert got.waiting_prompt_tokens is None


def test_a_restarted_engine_counts_its_whole_histogram_sum_as_new():
    prev = parse_snapshot(ex.vllm(prompt_lengths={2000: 50}, prompt_sum=50 * 1500.0), 100.0)
    # The engine restarted (new _created) and has since finished 2 prompts of 4,000 tokens: the sum went down
    # from 75,000 to 8,000, and all of it is the interval's, so the mean is 4,000, not (8,000 − 75,000) / 2.
    cur = parse_snapshot(ex.vllm(prompt_lengths={5000: 2}, prompt_sum=8000.0, waiting=1.0, created=1.8e9), 105.0)
    assert figures(prev, cur).waiting_prompt_tokens == pytest.approx(4000.0)


def test_pods_merge_by_summing_histogram_sums_and_waiting():
    # Pod a: the interval above (mean 2,000, 3 waiting). Pod b: 2 prompts of 500 tokens (sum 1,000), 1 waiting.
    a = increments(*vllm_interval())
    b = increments(parse_snapshot(ex.vllm(), 100.0),
                   parse_snapshot(ex.vllm(prompt_lengths={500: 2}, prompt_sum=1000.0, waiting=1.0), 105.0))
    got = figures_from_increments(merge_increments([a, b]))
    # 12 prompts of 21,000 tokens in all: mean 1,750; 4 waiting → 7,000.
    assert got.waiting_prompt_tokens == pytest.approx(7000.0)


def test_sglang_queue_time_histogram_and_finished_requests():
    prev = parse_snapshot(ex.sglang(requests=40.0), 0.0)
    # 20 scheduled in the interval: 19 within 0.1 s, one in (0.5, 1]; 20 more requests counted in 10 s.
    cur = parse_snapshot(ex.sglang(requests=60.0, queue={0.1: 19, 1.0: 20}), 10.0)
    got = figures(prev, cur)
    # Rank 19 of 20 is the last of (0.05, 0.1]: 0.1 s.
    assert got.queue_time_p95_s == pytest.approx(0.1)
    assert got.requests_per_s == pytest.approx(2.0)


def test_histogram_sums_survive_the_snapshot_json_round_trip():
    _, cur = vllm_interval()
    again = Snapshot.from_dict(json.loads(json.dumps(cur.to_dict())))
    assert again == cur
    assert sum(again.sums["request_prompt_tokens"].values()) == 20000.0
