"""A window judged from the engines' histograms when the gateway metered none of the service's requests: the
histograms summed over the window become one sample per request (hand-worked quantiles below), and the controller
judges and acts on them like metered requests, saying where its figures came from."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from apps.rollouts.analysis import cache_hit_rate, p95
from apps.rollouts.controller import step_rollout
from apps.rollouts.engine_samples import samples_from_window
from apps.rollouts.models import Rollout
from apps.telemetry.models import RevisionIncrement
from apps.telemetry.revisions import EngineWindow
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


def engine_rows(service, start, *, ttft_buckets, role):
    """One scrape interval of 200 requests for `role`, identical ITL on both sides."""
    RevisionIncrement.objects.create(
        service=service, role=role, time=start + timedelta(seconds=30), finished=200, failed=0, preemptions=0,
        prompt_tokens=200 * 600, cached_tokens=0, ttft_buckets=ttft_buckets,
        itl_buckets=[[0.01, 150], [0.02, 200], ["+Inf", 200]])


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
    assert ttft["buckets"][0]["bucket"] == "all"  # histograms do not pair TTFT with prompt length
    assert decision.reason.startswith(
        "Fail (judged on the engines' histograms: no metered requests of both revisions in the window): TTFT p95 "
        "0.38 s vs stable 0.19 s (×2.00) > ×1.20 allowed")
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
