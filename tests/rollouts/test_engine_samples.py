"""A window judged from the engines' histograms when the gateway metered none of the service's requests: the
histograms summed over the window become one sample per request (hand-worked quantiles below), and the controller
judges and acts on them like metered requests, saying where its figures came from."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from apps.rollouts.analysis import Thresholds, Verdict, analyse, cache_hit_rate, p95
from apps.rollouts.controller import step_rollout
from apps.rollouts.engine_samples import samples_from_window
from apps.rollouts.models import Rollout
from apps.telemetry.models import RevisionIncrement
from apps.telemetry.revisions import EngineWindow, _read
from tests.rollouts.conftest import meter

INF = math.inf


def test_a_windows_histograms_become_one_sample_per_request():
    window = EngineWindow(ttft_buckets={0.1: 50, 0.2: 100, INF: 100}, itl_buckets={0.01: 100, INF: 100},
                          finished=105, failed=5, preemptions=150, prompt_tokens=105_000, cached_tokens=52_500)
    samples = samples_from_window(window)
    # 100 requests with a first token and 5 that failed without.
    assert len(samples) == 105
    assert [s.error for s in samples].count(True) == 5
    # p95 = the 95th of 100 values, the quantile at 94.5 / 100: 44.5 of the 50 in (0.1, 0.2] → 0.1 + 0.1 × 0.89.
    assert p95([s.ttft_s for s in samples if s.ttft_s is not None]) == pytest.approx(0.189)
    # 150 preemptions over 100 requests: 50 of them preempted twice, 50 once.
    assert sum(s.preemptions for s in samples) == 150 and max(s.preemptions for s in samples) == 2
    # 1,000 prompt tokens a request, half of them from the prefix cache.
    assert (samples[0].prompt_tokens, samples[0].cached_tokens, cache_hit_rate(samples)) == (1000, 500, 0.5)


def test_an_empty_window_has_no_samples():
    assert samples_from_window(EngineWindow()) == []


def engine_rows(service, start, *, ttft_buckets, role, prompt_buckets=()):
    """One scrape interval of 200 requests for `role`, identical ITL on both sides."""
    RevisionIncrement.objects.create(
        service=service, role=role, time=start + timedelta(seconds=30), finished=200, failed=0, preemptions=0,
        prompt_tokens=200 * 600, cached_tokens=0, ttft_buckets=ttft_buckets,
        itl_buckets=[[0.01, 150], [0.02, 200], ["+Inf", 200]], prompt_buckets=list(prompt_buckets))


STABLE = [[0.1, 100], [0.2, 200], ["+Inf", 200]]  # p95: 0.1 + 0.1 × 89.5 / 100 = 0.1895 s
DOUBLED = [[0.2, 100], [0.4, 200], ["+Inf", 200]]  # p95 0.379 s; its 99 % lower bound (rank 182) 0.363 s > 0.2274


def test_without_metered_requests_a_slow_canary_is_rolled_back_on_its_engines_histograms(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=STABLE, role="stable")
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=DOUBLED, role="canary")
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action) == ("fail", "roll_back")
    assert (decision.canary_requests, decision.stable_requests) == (200, 200)
    ttft = next(m for m in decision.metrics if m["name"] == "TTFT p95")
    assert (ttft["canary"], ttft["stable"]) == (pytest.approx(0.379), pytest.approx(0.1895))
    assert ttft["buckets"][0]["bucket"] == "all"  # no prompt-length histogram to pair TTFT with
    assert decision.reason.startswith(
        "Fail (judged on the engines' histograms: no metered requests of both revisions in the window; no "
        "prompt-length histogram, so TTFT over all prompt lengths): TTFT p95 0.38 s vs stable 0.19 s (×2.00) > "
        "×1.20 allowed")
    assert Rollout.objects.get(pk=rollout.pk).phase == "rolled_back"


def test_metered_requests_are_preferred_to_the_engines_histograms(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    steady = [100 + i % 50 for i in range(200)]
    meter(canary_service, rollout.step_started_at, canary_pod="chat-r2-5c6d-xyz12", ttfts_ms=steady,
          stable_ttfts_ms=steady)
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=STABLE, role="stable")
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=DOUBLED, role="canary")
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action) == ("pass", "advance")
    assert decision.reason.startswith("Pass: all 4 metrics within bounds")


def test_metered_rows_that_name_no_canary_engine_leave_the_judgement_to_the_engines(canary_service, new_runtime):
    # Behind a router that names no backend every metered row names the router pod: no canary requests among them.
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    steady = [100 + i % 50 for i in range(200)]
    meter(canary_service, rollout.step_started_at, canary_pod="chat-router-6b8c-aaaaa", ttfts_ms=steady,
          stable_ttfts_ms=steady)
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=STABLE, role="stable")
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=DOUBLED, role="canary")
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action, decision.canary_requests) == ("fail", "roll_back", 200)
    assert decision.reason.startswith("Fail (judged on the engines' histograms")


# Prompt lengths by rank. 200 requests a side; the prompt histograms' bounds put each request's tokens to prefill
# inside one analysis bucket (250–1k or 1k–4k), as no quantile falls on a bucket's lower bound.
# Stable: 190 prompts in (250, 1000], 10 in (1000, 4000]; TTFT 190 in (0, 40 ms], 10 in (40 ms, 0.5 s].
STABLE_PROMPTS = [[250, 0], [1000, 190], [4000, 200], ["+Inf", 200]]
STABLE_TTFT = [[0.04, 190], [0.5, 200], ["+Inf", 200]]
# A canary as fast but with half its prompts long: 100 and 100 of each.
LONGER_PROMPTS = [[250, 0], [1000, 100], [4000, 200], ["+Inf", 200]]
LONGER_TTFT = [[0.04, 100], [0.5, 200], ["+Inf", 200]]


def window(ttft, prompts, cached_tokens=0.0):
    return EngineWindow(ttft_buckets=_read(ttft), prompt_buckets=_read(prompts), itl_buckets={0.01: 200, INF: 200},
                        finished=200, prompt_tokens=200_000, cached_tokens=cached_tokens)


def test_ttft_is_paired_with_prompt_lengths_by_rank():
    # The i-th of 100 requests (quantile (i + ½)/100) gets the i-th TTFT and the i-th prompt: the 50 fastest have
    # the 50 shortest prompts. First: TTFT 0.1 × 0.5/50 = 1 ms, prompt 500 × 0.5/50 = 5 tokens; last: TTFT
    # 0.1 + 0.1 × 49.5/50 = 0.199 s, prompt 500 + 1,500 × 49.5/50 = 1,985 tokens. A quarter of the window's prompt
    # tokens came from the cache: 1,985 × 0.25 = 496.25 → 496 cached.
    samples = samples_from_window(EngineWindow(
        ttft_buckets={0.1: 50, 0.2: 100, INF: 100}, prompt_buckets={500: 50, 2000: 100, INF: 100},
        finished=100, prompt_tokens=100_000, cached_tokens=25_000))
    assert (samples[0].ttft_s, samples[0].prompt_tokens) == (pytest.approx(0.001), 5)
    assert (samples[-1].ttft_s, samples[-1].prompt_tokens, samples[-1].cached_tokens) == (
        pytest.approx(0.199), 1985, 496)
    assert all((s.ttft_s <= 0.1) == (s.prompt_tokens <= 500) for s in samples)


def test_a_canary_with_longer_prompts_at_the_same_speed_passes_on_its_engines():
    # Stable's buckets: 250–1k holds its 190 fastest, TTFT 0.04 × (i + ½)/190; p95 rank ⌈0.95 × 190⌉ = 181 (i = 180)
    # → 0.04 × 180.5/190 = 0.038 s. 1k–4k its 10 slowest, 0.04 + 0.46 × (j + ½)/10; p95 rank 10 → 0.477 s.
    # The canary's 250–1k: 100 at 0.04 × (i + ½)/100, rank 95 → 0.0378 s; 1k–4k: 100, rank 95 → 0.04 + 0.46 × 0.945
    # = 0.4747 s. Under stable's mix (0.95, 0.05): canary 0.0359 + 0.0237 = 0.0596 s, stable 0.0361 + 0.0239
    # = 0.0600 s: a pass. Over all prompts the canary's p95 (rank 190 of 200: 0.04 + 0.46 × 89.5/100 = 0.4517 s)
    # would be ×11 stable's (0.04 × 189.5/190 = 0.0399 s).
    canary = samples_from_window(window(LONGER_TTFT, LONGER_PROMPTS))
    stable = samples_from_window(window(STABLE_TTFT, STABLE_PROMPTS))
    result = analyse(canary, stable)
    assert result.verdict == Verdict.PASS
    ttft = next(m for m in result.metrics if m.name == "TTFT p95")
    assert (ttft.canary, ttft.stable) == (pytest.approx(0.059645), pytest.approx(0.05995))
    assert [(b["bucket"], b["canary_requests"], b["stable_requests"]) for b in ttft.detail["buckets"]] == [
        ("250–1k", 100, 190), ("1k–4k", 100, 10)]
    assert analyse(canary, stable, thresholds=Thresholds(buckets=())).verdict == Verdict.FAIL


def test_a_canary_twice_as_slow_per_bucket_fails_on_its_engines():
    # Stable's prompts, TTFTs twice as long: 250–1k 0.04 + 0.04 × 180.5/190 = 0.078 s, 1k–4k 0.08 + 0.92 × 9.5/10
    # = 0.954 s; under stable's mix 0.95 × 0.078 + 0.05 × 0.954 = 0.1218 s against 0.05995 s: ×2.03 > ×1.20. The
    # worst bucket is 250–1k (0.078 / 0.038 = ×2.05 against 1k–4k's 0.954 / 0.477 = ×2.00).
    slow = [[0.04, 0], [0.08, 190], [1.0, 200], ["+Inf", 200]]
    result = analyse(samples_from_window(window(slow, STABLE_PROMPTS)),
                     samples_from_window(window(STABLE_TTFT, STABLE_PROMPTS)))
    assert result.verdict == Verdict.FAIL
    assert result.reason == ("TTFT p95 0.12 s vs stable 60 ms (×2.03) > ×1.20 allowed (worst in the 250–1k prompt "
                             "bucket: 78 ms vs 38 ms)")


def test_the_controller_pairs_prompt_lengths_when_both_revisions_export_them(canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=STABLE_TTFT, prompt_buckets=STABLE_PROMPTS,
                role="stable")
    engine_rows(canary_service, rollout.step_started_at, ttft_buckets=LONGER_TTFT, prompt_buckets=LONGER_PROMPTS,
                role="canary")
    decision = step_rollout(rollout.pk, rollout.window_started_at + timedelta(seconds=61))
    assert (decision.verdict, decision.action) == ("pass", "advance")
    assert decision.reason.startswith(
        "Pass (judged on the engines' histograms: no metered requests of both revisions in the window; TTFT paired "
        "with prompt lengths by rank): all 4 metrics within bounds")
