"""Speculative decoding's acceptance rate, scraped from a service's engines in kubesim and stored per interval.

By hand (n-gram drafting, 3 tokens, the engine model's assumed acceptance 0.5): a step emits 1.875 tokens on
average, the fraction carried per request, so the 100 tokens after each request's first take 54 steps
(tests/kubesim/engines/test_speculative.py): 162 tokens drafted and 100 - 54 = 46 accepted, a rate of 0.284.
"""

from __future__ import annotations

import pytest

from apps.telemetry.models import SERVICE_ROLE, SeriesPoint
from tests.telemetry.conftest import send_load
from workers.telemetry import scrape_all

pytestmark = pytest.mark.django_db

ENGINE = [{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}]


def test_the_acceptance_rate_is_accepted_over_drafted_tokens(deploy, tenant_a, sim):
    service = deploy(tenant_a, "spec", pools=ENGINE,
                     engine_settings={"speculative_method": "ngram", "num_speculative_tokens": 3})
    scrape_all()
    send_load(sim, service, requests=4, concurrency=1, max_tokens=101)
    scrape_all()
    rates = list(SeriesPoint.objects.filter(service=service, role=SERVICE_ROLE, spec_accept_rate__isnull=False)
                 .values_list("spec_accept_rate", flat=True))
    assert rates == [pytest.approx(46 / 162, abs=1e-4)]


def test_an_engine_without_speculative_decoding_has_no_rate(deploy, tenant_a, sim):
    service = deploy(tenant_a, "plain", pools=ENGINE)
    scrape_all()
    send_load(sim, service, requests=2, concurrency=1, max_tokens=16)
    scrape_all()
    assert SeriesPoint.objects.filter(service=service).exists()
    assert not SeriesPoint.objects.filter(service=service, spec_accept_rate__isnull=False).exists()
