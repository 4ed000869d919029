"""`GET /api/v1/capacity/` and `/api/v1/capacity/suggestions/`: any signed-in user, models scoped to what
the user may see, 400 naming the parameter."""

from __future__ import annotations

import pytest

from tests.factories import ModelFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/capacity/"


@pytest.fixture
def models(tenant_a, tenant_b):
    return {
        "platform": ModelFactory(name="llama-3-1-8b-instruct"),
        "private_b": ModelFactory(name="secret-8b", tenant=tenant_b,
                                  source_uri="hf://globex/Secret-8B-Instruct"),
    }


def test_a_viewer_plans_a_platform_model_by_source_id(api, models):
    response = api("viewer_a").get(URL, {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu_type": "l4-24gb",
                                         "max_model_len": 16384})
    assert response.status_code == 200, response.content
    body = response.json()
    # 3017 blocks x 16 = 48,272 tokens (tests/capacity/test_arithmetic.py); / 16,384 = 2.95 sequences.
    assert (body["num_blocks"], body["max_tokens"], body["max_concurrent_at_context"]) == (3017, 48_272, 2.95)
    assert body["fits"] is True and body["min_tp"] == 1


def test_another_tenants_private_model_is_unknown_to_you(api, models):
    response = api("owner_a").get(URL, {"model": "secret-8b", "gpu_type": "h100-sxm-80gb"})
    assert response.status_code == 400
    assert "unknown model 'secret-8b'" in response.json()["model"][0]
    response = api("owner_a").get(URL, {"model": "globex/Secret-8B-Instruct", "gpu_type": "h100-sxm-80gb"})
    assert response.status_code == 400
    assert api("member_b").get(URL, {"model": "secret-8b", "gpu_type": "h100-sxm-80gb"}).status_code == 200


def test_anonymous_is_refused(api, models):
    assert api("anonymous").get(URL, {"model": "llama-3-1-8b-instruct", "gpu_type": "l4-24gb"}).status_code in (
        401, 403)


@pytest.mark.parametrize("params, field", [
    ({"gpu_type": "t4-16gb"}, "gpu_type"),
    ({"gpu_type": "l4-24gb", "tp": "zero"}, "tp"),
    ({"gpu_type": "l4-24gb", "tp": "0"}, "tp"),
    ({"gpu_type": "l4-24gb", "kv_cache_dtype": "int3"}, "kv_cache_dtype"),
    ({"gpu_type": "l4-24gb", "gpu_memory_utilization": "1.5"}, "gpu_memory_utilization"),
    ({"gpu_type": "l4-24gb", "max_model_len": "999999"}, "max_model_len"),
    ({"gpu_type": "l4-24gb", "gpu": "l4-24gb"}, "gpu"),
    ({}, "gpu_type"),
])
def test_bad_parameters_are_400_naming_the_parameter(api, models, params, field):
    response = api("viewer_a").get(URL, {"model": "llama-3-1-8b-instruct", **params})
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_suggestions_over_the_api(api, models):
    response = api("viewer_a").get(URL + "suggestions/", {
        "model": "llama-3-1-8b-instruct", "rate": 10, "prompt_tokens": 512, "output_tokens": 128, "ttft_slo": 0.5})
    assert response.status_code == 200, response.content
    options = response.json()["suggestions"]
    assert options and all(o["ttft_p95_s"] <= 0.5 for o in options)
    response = api("viewer_a").get(URL + "suggestions/", {
        "model": "llama-3-1-8b-instruct", "rate": 10, "prompt_tokens": 512, "output_tokens": 128, "ttft_slo": 0.5,
        "gpu_types": "h100-sxm-80gb,l4-24gb"})
    assert {o["gpu"] for o in response.json()["suggestions"]} <= {"h100-sxm-80gb", "l4-24gb"}
    response = api("viewer_a").get(URL + "suggestions/", {"model": "llama-3-1-8b-instruct", "rate": 10})
    assert response.status_code == 400 and "ttft_slo" in response.json()


def test_the_endpoints_are_in_the_openapi_schema(api):
    schema = api("viewer_a").get("/api/schema/", {"format": "json"}).json()
    params = {p["name"] for p in schema["paths"]["/api/v1/capacity/"]["get"]["parameters"]}
    assert {"model", "gpu_type", "tp", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len"} <= params
    assert "/api/v1/capacity/suggestions/" in schema["paths"]


def test_the_cpu_tier_is_reported_in_tokens_and_a_bad_size_is_400(api, models):
    query = {"model": "llama-3-1-8b-instruct", "gpu_type": "l4-24gb"}
    # 131,072 KV bytes per token (bf16, TP 1): 4 GiB = 2,048 blocks of 2 MiB = 32,768 tokens.
    body = api("viewer_a").get(URL, {**query, "cpu_tier_gib": 4}).json()
    assert (body["cpu_tier_tokens"], body["max_tokens"]) == (32_768, 48_272)
    # One 2 MiB block over the L4's PCIe 4.0 x16 link (31.5e9 bytes/s): 2,097,152 / 31.5e9 s = 66.6 µs.
    assert body["cpu_tier_block_load_us"] == 66.6
    refused = api("viewer_a").get(URL, {**query, "cpu_tier_gib": 0})
    assert refused.status_code == 400 and "cpu_tier_gib" in refused.json()
