"""Canary analysis, worked out by hand: every expected figure below is computed in the comments from the
samples the test builds. Pure: no database.

Defaults used throughout (Thresholds()): tolerance 0.2, at least 100 requests a side, 10 per bucket,
buckets of tokens to prefill <250 / 250–1k / 1k–4k / ≥4k, error slack 0.01, preemption slack 0.05,
confidence 0.99, so z = 2.3263. Inside a bucket where every value is the same, the p95 and its lower
confidence bound are that value, whatever the ranks.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from apps.rollouts.analysis import (
    Action,
    Readiness,
    Sample,
    StepState,
    Thresholds,
    Verdict,
    analyse,
    decide,
    p95,
    p95_lower,
)


def requests(n, prompt=500, ttft=0.5, itl=0.03, cached=0, error=False, preemptions=0):
    """n identical requests; an error has no TTFT or ITL."""
    if error:
        return [Sample(prompt_tokens=prompt, ttft_s=None, cached_tokens=cached, error=True)] * n
    return [Sample(prompt_tokens=prompt, ttft_s=ttft, itl_s=itl, cached_tokens=cached,
                   preemptions=preemptions)] * n


def metric(result, name):
    return next(m for m in result.metrics if m.name == name)


def test_equal_revisions_pass_on_every_metric():
    # Both: prompt 500 (the 250–1k bucket), TTFT 0.5 s, ITL 30 ms, no errors, no preemptions.
    # TTFT allowed 0.5 × 1.2 = 0.6 s, ITL 0.03 × 1.2 = 36 ms, errors 0 × 1.2 + 0.01, preemptions 0.05.
    result = analyse(requests(100), requests(1000))
    assert result.verdict == Verdict.PASS
    assert result.reason == "all 4 metrics within bounds over 100 canary and 1000 stable requests"
    ttft = metric(result, "TTFT p95")
    assert (ttft.canary, ttft.stable, ttft.allowed) == (0.5, 0.5, pytest.approx(0.6))
    assert metric(result, "error rate").allowed == pytest.approx(0.01)
    assert all(m.passed for m in result.metrics)


def test_a_canary_twice_as_slow_fails_naming_ttft_and_its_bucket():
    # Canary TTFT 1.0 s against 0.5 s: ×2.00 > ×1.20; its lower bound is 1.0 s too, above the 0.6 s allowed.
    result = analyse(requests(100, ttft=1.0), requests(1000, ttft=0.5))
    assert result.verdict == Verdict.FAIL
    assert result.reason == "TTFT p95 1.00 s vs stable 0.50 s (×2.00) > ×1.20 allowed in the 250–1k prompt bucket"
    assert metric(result, "TTFT p95").outcome == Verdict.FAIL
    assert metric(result, "ITL p95").passed
    stored = json.loads(json.dumps(result.as_dict()))  # what a decision row would keep
    assert stored["verdict"] == "fail" and stored["metrics"][0]["buckets"][0]["bucket"] == "250–1k"
    assert (stored["metrics"][0]["canary"], stored["metrics"][0]["stable"]) == (1.0, 0.5)


# A canary exactly as fast as stable that happens to get longer prompts: stable has 970 short requests
# (prompt 500, 0.5 s) and 30 long ones (prompt 2,000, the 1k–4k bucket, 1.5 s); the canary 20 short, 80 long.
def longer_prompts():
    return requests(20) + requests(80, prompt=2000, ttft=1.5), requests(970) + requests(30, prompt=2000, ttft=1.5)


def test_a_canary_that_only_got_longer_prompts_passes_when_bucketed():
    # Stable's weights: 250–1k 970/1000 = 0.97, 1k–4k 30/1000 = 0.03 (both buckets have ≥ 10 on each side).
    # Canary under stable's mix: 0.97 × 0.5 + 0.03 × 1.5 = 0.485 + 0.045 = 0.53 s; stable the same 0.53 s.
    result = analyse(*longer_prompts())
    assert result.verdict == Verdict.PASS
    ttft = metric(result, "TTFT p95")
    assert ttft.canary == pytest.approx(0.53) and ttft.stable == pytest.approx(0.53)
    assert [(b["bucket"], b["weight"]) for b in ttft.detail["buckets"]] == [("250–1k", 0.97), ("1k–4k", 0.03)]


def test_the_same_canary_fails_without_buckets():
    # One bucket: canary's 100 sorted values are 20 × 0.5 then 80 × 1.5, p95 = rank ⌈95⌉ = 95 → 1.5 s, and its
    # lower bound rank ⌊95 − 2.3263 × √4.75⌋ = ⌊89.93⌋ = 89 → 1.5 s. Stable's rank 950 of 970 × 0.5 → 0.5 s.
    # 1.5 / 0.5 = ×3.00 > ×1.20.
    result = analyse(*longer_prompts(), thresholds=Thresholds(buckets=()))
    assert result.verdict == Verdict.FAIL
    assert result.reason == "TTFT p95 1.50 s vs stable 0.50 s (×3.00) > ×1.20 allowed"


def test_a_colder_cache_is_not_judged_slower():
    # Prompts of 2,000 tokens everywhere; a warm request has 1,600 cached (400 to prefill: 250–1k, 0.5 s), a cold
    # one none (2,000 to prefill: 1k–4k, 1.5 s). Stable 970 warm + 30 cold, canary 20 warm + 80 cold: the same
    # buckets as longer_prompts, so 0.53 s on both sides. Hit rates beside it: canary 20 × 1,600 / (100 × 2,000)
    # = 0.16, stable 970 × 1,600 / (1,000 × 2,000) = 0.776.
    canary = requests(20, prompt=2000, cached=1600) + requests(80, prompt=2000, ttft=1.5)
    stable = requests(970, prompt=2000, cached=1600) + requests(30, prompt=2000, ttft=1.5)
    result = analyse(canary, stable)
    assert result.verdict == Verdict.PASS
    ttft = metric(result, "TTFT p95")
    assert ttft.canary == pytest.approx(0.53)
    assert ttft.detail["cache_hit_rate"] == {"canary": pytest.approx(0.16), "stable": pytest.approx(0.776)}


def test_too_few_requests_is_inconclusive():
    result = analyse(requests(99, ttft=5.0), requests(1000))
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason == "only 99 canary requests in the window; at least 100 needed on each side"
    assert result.metrics == ()


def test_a_p95_above_the_allowance_but_not_surely_so_is_inconclusive():
    # Canary: 90 × 0.5 s and 10 × 1.0 s. p95 = rank 95 → 1.0 s > 0.6 s allowed, but the lower bound's rank 89
    # → 0.5 s is within it: not sure yet.
    result = analyse(requests(90) + requests(10, ttft=1.0), requests(1000))
    assert result.verdict == Verdict.INCONCLUSIVE
    ttft = metric(result, "TTFT p95")
    assert (ttft.canary, ttft.canary_lower, ttft.outcome) == (1.0, 0.5, Verdict.INCONCLUSIVE)
    assert result.reason.endswith("not sure yet: its lower confidence bound 0.50 s is within 0.60 s")


def test_nearest_rank_p95_and_its_lower_bound():
    # 0.01 … 1.00: p95 at rank ⌈0.95 × 100⌉ = 95 → 0.95; lower bound at ⌊95 − 2.3263 × √(100 × 0.95 × 0.05)⌋
    # = ⌊95 − 2.3263 × 2.1794⌋ = ⌊89.93⌋ = 89 → 0.89. With 10 values: rank ⌈9.5⌉ = 10 (the largest), lower
    # ⌊9.5 − 2.3263 × 0.6892⌋ = ⌊7.90⌋ = 7.
    values = [i / 100 for i in range(100, 0, -1)]
    assert p95(values) == 0.95 and p95_lower(values, Thresholds().z) == 0.89
    assert p95(list(range(1, 11))) == 10 and p95_lower(list(range(1, 11)), Thresholds().z) == 7


def test_an_error_rate_over_its_threshold_fails():
    # Stable 2 errors in 1,000 = 0.2 %, allowed 0.002 × 1.2 + 0.01 = 1.24 %. Canary 10 in 100 = 10 %, lower bound
    # (10 − 2.3263 × √10) / 100 = (10 − 7.36) / 100 = 2.64 % > 1.24 %.
    result = analyse(requests(90) + requests(10, error=True), requests(998) + requests(2, error=True))
    assert result.verdict == Verdict.FAIL
    assert result.reason == "error rate 10.0 % vs stable 0.2 % > 1.2 % allowed"
    errors = metric(result, "error rate")
    assert errors.allowed == pytest.approx(0.0124) and errors.canary_lower == pytest.approx(0.026435, abs=1e-5)


def test_a_canary_failing_every_request_fails_on_errors_though_it_has_no_ttft():
    # 100 errors of 100: no TTFT bucket to compare, but 100 % (lower bound (100 − 23.26) / 100 = 77 %) > 1.24 %.
    result = analyse(requests(100, error=True), requests(998) + requests(2, error=True))
    assert result.verdict == Verdict.FAIL
    assert result.reason == "error rate 100.0 % vs stable 0.2 % > 1.2 % allowed"
    assert [m.name for m in result.metrics] == ["ITL p95", "error rate", "preemptions"]


def test_without_a_comparable_ttft_bucket_the_window_is_inconclusive():
    # The canary's 100 requests all prefill 2,000 tokens (1k–4k), where stable has only 9 (its other 991 are in
    # 250–1k): no bucket has 10 on both sides. ITL and rates are equal, so nothing fails either.
    result = analyse(requests(100, prompt=2000), requests(991) + requests(9, prompt=2000))
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason == "no bucket of prompt length and load has 10 successful requests on both sides"


def test_two_errors_in_a_hundred_are_not_enough_to_fail():
    # 2 % > 1.24 %, but the lower bound (2 − 2.3263 × √2) / 100 is below 0, so 0: inconclusive.
    result = analyse(requests(98) + requests(2, error=True), requests(998) + requests(2, error=True))
    assert result.verdict == Verdict.INCONCLUSIVE
    assert metric(result, "error rate").canary_lower == 0.0


def test_more_inter_token_latency_or_preemptions_fail():
    # ITL 60 ms vs 30 ms = ×2.00. Preemptions 1 a request vs 0: lower (100 − 2.3263 × 10) / 100 = 0.77 > 0.05.
    result = analyse(requests(100, itl=0.06, preemptions=1), requests(1000))
    assert result.verdict == Verdict.FAIL
    assert result.reason == ("ITL p95 60 ms vs stable 30 ms (×2.00) > ×1.20 allowed; "
                             "preemptions 1.00 per request vs stable 0.00 per request > 0.05 per request allowed")


@pytest.mark.parametrize(("readiness", "reason"), [
    (Readiness(crash_looping=True), "the canary is crash-looping"),
    (Readiness(never_ready=True), "the canary never became ready"),
])
def test_a_crash_looping_or_never_ready_canary_fails_at_once(readiness, reason):
    # No samples at all: without the readiness fact this would be inconclusive (0 < 100).
    result = analyse([], requests(1000), readiness)
    assert (result.verdict, result.reason) == (Verdict.FAIL, reason)


def test_an_absolute_slo_breach_fails_even_when_relatively_equal():
    # Both 0.5 s; allowed min(0.5 × 1.2, 0.4) = 0.4 s; the canary's 0.5 s (its lower bound too) is above it.
    result = analyse(requests(100), requests(1000), thresholds=Thresholds(ttft_p95_slo_s=0.4))
    assert result.verdict == Verdict.FAIL
    assert result.reason == ("TTFT p95 0.50 s above the service's objective of 0.40 s (stable 0.50 s) "
                             "in the 250–1k prompt bucket")
    assert metric(result, "TTFT p95").allowed == 0.4


@pytest.mark.parametrize(("verdict", "state", "action"), [
    (Verdict.FAIL, StepState(last_step=False), Action.ROLL_BACK),
    (Verdict.FAIL, StepState(last_step=True), Action.ROLL_BACK),
    (Verdict.PASS, StepState(last_step=False), Action.ADVANCE),
    (Verdict.PASS, StepState(last_step=True), Action.PROMOTE),
    (Verdict.INCONCLUSIVE, StepState(last_step=False, inconclusive_count=0, max_extensions=2), Action.EXTEND),
    (Verdict.INCONCLUSIVE, StepState(last_step=True, inconclusive_count=1, max_extensions=2), Action.EXTEND),
    (Verdict.INCONCLUSIVE, StepState(last_step=False, inconclusive_count=2, max_extensions=2), Action.HOLD),
    (Verdict.INCONCLUSIVE, StepState(last_step=False, inconclusive_count=2, max_extensions=2,
                                     when_exhausted=Action.ROLL_BACK), Action.ROLL_BACK),
])
def test_the_step_policy(verdict, state, action):
    assert decide(verdict, state) == action


def test_the_analysis_loads_without_django():
    code = "import sys, apps.rollouts.analysis; assert 'django' not in sys.modules, 'django imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
