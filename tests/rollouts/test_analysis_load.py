"""Canary analysis by load: TTFT is compared between requests that met the same number of requests ahead of them on
their pod, so a canary whose one pod gets 5 % of the requests is not judged against stable requests that waited
behind others. Worked by hand; the defaults of tests/rollouts/test_analysis.py (tolerance 0.2, 100 requests a side,
10 per bucket, prompt 500 tokens in the 250–1k bucket, load buckets 0 / 1 / 2–3 / 4–7 / 8–15 / ≥16 ahead)."""

from __future__ import annotations

import pytest

from apps.rollouts.analysis import Sample, Thresholds, Verdict, analyse, requests_ahead


def requests(n, ttft, ahead):
    return [Sample(prompt_tokens=500, ttft_s=ttft, itl_s=0.03, ahead=ahead)] * n


def ttft_of(result):
    return next(m for m in result.metrics if m.name == "TTFT p95")


def test_requests_ahead_counts_the_requests_of_its_pod_still_waiting_for_a_first_token():
    # (pod, sent, first token): the 2nd, sent at 2, waits behind the 1st (first token at 10); the 3rd, at 6, behind
    # the 1st only (the 2nd got its token at 5); pod b's is alone; the 5th, sent at 10, finds the 1st just answered
    # (a token at 10 is no longer ahead) and the 3rd answered at 8.
    spans = [("a", 0, 10), ("a", 2, 5), ("a", 6, 8), ("b", 3, 4), ("a", 10, 11)]
    assert requests_ahead(spans) == [0, 1, 1, 0, 0]


# Stable: 900 requests alone on their pod at 0.5 s and 100 that waited behind another at 1.5 s; over all of them
# its p95 (rank 950 of 1,000) is 1.5 s.
STABLE = requests(900, 0.5, 0) + requests(100, 1.5, 1)


def test_stables_waiting_requests_do_not_hide_a_twice_as_slow_canary():
    # The canary's 100 requests were all alone on its pod, at 1.0 s. By load only the (250–1k, 0 ahead) bucket has
    # 10 on both sides: canary 1.0 s against stable's 0.5 s, ×2.00 > ×1.20, and the lower bound is 1.0 s too.
    result = analyse(requests(100, 1.0, 0), STABLE)
    assert result.verdict == Verdict.FAIL
    assert result.reason == ("TTFT p95 1.00 s vs stable 0.50 s (×2.00) > ×1.20 allowed in the 250–1k prompt bucket "
                             "with 0 ahead on their pod")
    (bucket,) = ttft_of(result).detail["buckets"]
    assert (bucket["ahead"], bucket["canary_requests"], bucket["stable_requests"]) == ("0 ahead", 100, 900)
    # Over every load the canary's 1.0 s is within 1.5 × 1.2 = 1.8 s: the same canary would pass.
    assert analyse(requests(100, 1.0, 0), STABLE, thresholds=Thresholds(load_buckets=())).verdict == Verdict.PASS


def test_a_canary_as_fast_as_stable_on_a_quieter_pod_passes():
    # 100 canary requests alone on its pod at 0.5 s against stable's 0.5 s in the same bucket.
    result = analyse(requests(100, 0.5, 0), STABLE)
    assert result.verdict == Verdict.PASS
    assert (ttft_of(result).canary, ttft_of(result).stable) == (0.5, 0.5)


def test_a_canary_whose_requests_mostly_wait_is_compared_by_prompt_length_alone():
    # A slow canary keeps requests waiting: 40 met none ahead, 60 met 2 (a bucket where stable has none). By load
    # only 40 of its 100 would be compared, under half, so TTFT is compared over every load: canary 1.0 s (all its
    # values), stable 1,000 requests at 0.5 s: ×2.00, failed, and the one bucket has no load.
    stable = requests(1000, 0.5, 0)
    result = analyse(requests(40, 1.0, 0) + requests(60, 1.0, 2), stable)
    assert result.verdict == Verdict.FAIL
    assert result.reason == "TTFT p95 1.00 s vs stable 0.50 s (×2.00) > ×1.20 allowed in the 250–1k prompt bucket"
    (bucket,) = ttft_of(result).detail["buckets"]
    assert (bucket["ahead"], bucket["canary_requests"]) == (None, 100)
    assert ttft_of(result).stable == pytest.approx(0.5)
