"""The lab's speculative decoding drafts as the service's own engines report it: the acceptance rate they export
(accepted over drafted tokens, `vllm:spec_decode_num_*`), stored per interval, becomes the chance a drafted token
is accepted for every scenario that drafts the same way; a scenario that drafts otherwise keeps the engine model's
assumption (n-gram 0.5, a draft model 0.7).

By hand: with 3 drafts a step, a rate of 0.2 means 0.6 tokens accepted a step, so 1 + a + a^2 + a^3 = 1.6:
a = 0.39 gives 0.6014, a = 0.389 gives 0.5984: a = 0.3895.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.telemetry.models import SERVICE_ROLE, SeriesPoint
from apps.whatif.scenarios import scenario
from tests.factories import InferenceServiceFactory, ModelFactory

pytestmark = pytest.mark.django_db

NGRAM = {"speculative_method": "ngram", "num_speculative_tokens": 3}


def _service(tenant, settings):
    return InferenceServiceFactory(
        tenant=tenant, name="chat", engine_settings={"max_model_len": 8192, **settings},
        pools=[{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1, "gpu_type": "l4-24gb"}])


def _rates(service, rate, minutes_ago=0):
    now = timezone.now() - timedelta(minutes=minutes_ago)
    for i in range(10):
        SeriesPoint.objects.create(service=service, role=SERVICE_ROLE, time=now - timedelta(seconds=60 * i + 5),
                                   ready_replicas=1, spec_accept_rate=rate)


def test_the_reported_rate_sets_the_acceptance_of_scenarios_that_draft_alike(tenant_a):
    service = _service(tenant_a, NGRAM)
    assert scenario(service, {}, "current").spec.core.spec_acceptance == 0.5  # nothing measured: the assumption
    _rates(service, 0.2)
    assert scenario(service, {}, "current").spec.core.spec_acceptance == pytest.approx(0.3895, abs=1e-3)
    # More drafts from the same n-gram drafter: the same chance a drafted token is accepted.
    more = scenario(service, {"name": "5 drafts", "engine_settings": {"num_speculative_tokens": 5}}, "5 drafts")
    assert (more.spec.core.spec_tokens, more.spec.core.spec_acceptance) == (5, pytest.approx(0.3895, abs=1e-3))


def test_a_scenario_that_drafts_otherwise_keeps_the_assumption_and_its_draft_is_the_catalogs(tenant_a):
    # A draft the engine simulation does not know by name: simulated with the architecture its catalog row gives.
    ModelFactory(tenant=tenant_a, name="tiny-draft", source_uri="hf://acme/tiny-draft@main",
                 parameters_billions=0.6, layers=12, hidden_size=1024, attention_heads=16, kv_heads=4, head_dim=64)
    service = _service(tenant_a, NGRAM)
    _rates(service, 0.2)
    other = scenario(service, {"name": "draft", "engine_settings": {
        "speculative_method": "draft_model", "speculative_model": "tiny-draft"}}, "draft")
    d = other.spec.core.draft
    assert (d.params_b, d.layers, d.hidden, d.kv_heads, d.head_dim) == (0.6, 12, 1024, 4, 64)
    assert other.spec.core.spec_acceptance == 0.7


def test_rates_older_than_the_hour_are_not_taken(tenant_a):
    service = _service(tenant_a, NGRAM)
    _rates(service, 0.2, minutes_ago=75)
    assert scenario(service, {}, "current").spec.core.spec_acceptance == 0.5
