"""Production-shaped load (capacity/production.py): the stated distributions, checked on large seeded samples
against figures worked from their definitions."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace
from itertools import pairwise

import pytest

from capacity.production import PRODUCTION, ProductionShape


def test_the_zipf_tail_has_the_median_and_the_tail_its_parameters_give():
    # P(X ≥ x) = (x / 400)^−1.5: median 400 · 2^(1/1.5) = 635; P(X ≥ 4,000) = 10^−1.5 = 3.16 %.
    prompts = [p for p, _ in PRODUCTION["prod_conversation"].lengths(40000, random.Random(7))]
    assert statistics.median(prompts) == pytest.approx(635, rel=0.03)
    assert sum(p >= 4000 for p in prompts) / len(prompts) == pytest.approx(10 ** -1.5, abs=0.004)
    assert min(prompts) == 400


def test_the_log_normal_lengths_have_their_medians():
    lengths = PRODUCTION["prod_coding"].lengths(40000, random.Random(7))
    assert statistics.median(p for p, _ in lengths) == pytest.approx(1500, rel=0.03)
    assert statistics.median(o for _, o in lengths) == pytest.approx(13, abs=1)
    # σ 0.96: the p95 is 1,500 · e^(1.645 · 0.96) = 7,300 tokens.
    prompts = sorted(p for p, _ in lengths)
    assert prompts[int(0.95 * len(prompts))] == pytest.approx(1500 * math.exp(1.645 * 0.96), rel=0.05)


@pytest.mark.parametrize("name", sorted(PRODUCTION))
def test_arrivals_keep_the_mean_rate_and_come_burstier_than_poisson(name):
    shape = PRODUCTION[name]
    arrivals = shape.arrivals(10, random.Random(3))
    # The per-minute factor is log-normal with mean 1, so 10 hours bring about rate × 36,000 arrivals.
    assert len(arrivals) / 36000 == pytest.approx(shape.rate_per_s, rel=0.08)
    assert arrivals == sorted(arrivals) and arrivals[0] > 0 and arrivals[-1] < 36000
    # Without the minute swings the gaps' coefficient of variation is the renewal's: 1 / √k for a Gamma,
    # √(Γ(1 + 2/k) / Γ(1 + 1/k)² − 1) for a Weibull (k = 0.5: √(24 / 4 − 1) = 2.24).
    steady = replace(shape, minute_sigma=0.0)
    times = steady.arrivals(10, random.Random(5))
    gaps = [b - a for a, b in pairwise(times)]
    k = shape.k
    cv = 1 / math.sqrt(k) if shape.interarrival == "gamma" else \
        math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(cv, rel=0.12)
    assert cv > 1.5  # a Poisson process has 1


def test_a_shape_is_one_frozen_definition():
    shape = PRODUCTION["prod_coding"]
    assert isinstance(shape, ProductionShape)
    with pytest.raises(AttributeError):
        shape.k = 1.0
