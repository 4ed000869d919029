"""Admission: every pool of a service is checked against the GPUs' memory in the shared `clean()`.

Figures use the engine defaults the service would run with: vLLM's gpu_memory_utilization 0.92.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.serving.models import InferenceService, Pool
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(tenant_a):
    return {
        "cluster": ClusterFactory(name="sim"),
        "llama8": ModelFactory(name="llama-3-1-8b-instruct"),
        "llama70": ModelFactory(name="llama-3-1-70b-instruct", source_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
                                parameters_billions=70.6, layers=80, hidden_size=8192, attention_heads=64),
        "vllm": RuntimeFactory(name="vllm"),
    }


def body(catalog, model="llama8", gpu_type="l4-24gb", gpus=1, **settings):
    return {
        "tenant": "tenant-a", "name": "chat", "cluster": "sim", "model": catalog[model].pk,
        "runtime": catalog["vllm"].pk, "deployment_mode": "standard", "engine_settings": settings,
        "routing_policy": "round_robin",
        "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1, "gpus_per_replica": gpus,
                   "gpu_type": gpu_type, "nodes_per_replica": 1}],
    }


@pytest.fixture
def post(api, tenant_a):
    client = api("owner_a")
    slug = tenant_a.slug

    def send(data):
        data["tenant"] = slug
        return client.post("/api/v1/services/", data, format="json")

    return send


def test_weights_that_do_not_fit_are_refused_on_pools_with_what_would_fit(post, catalog):
    response = post(body(catalog, model="llama70", max_model_len=8192))
    assert response.status_code == 400
    message = " ".join(response.json()["pools"])
    # 70.6e9 x 2 B = 131.5 GiB against 24 GiB. Eight L4s hold 17.65e9 B each and start; one B200 (180 GiB x 0.92
    # = 165.6 GiB, minus 131.5 of weights, 4 of activations and 0.5 of overhead) keeps 29.6 GiB of KV.
    assert "weights need 131.5 GiB per GPU at TP 1; one L4 has 24 GiB" in message
    assert "needs ≥ 8 × L4 (TP 8) or 1 × B200 (TP 1)" in message
    assert not InferenceService.objects.exists()


def test_max_model_len_above_the_kv_capacity_is_refused_with_vllms_rule(post, catalog):
    # Llama 8B on one L4 at 0.92: 3262 blocks = 52,192 tokens (tests/kubesim/engines/test_capacity.py), below the
    # 131,072-token context the engine would default to.
    response = post(body(catalog))
    assert response.status_code == 400
    message = " ".join(response.json()["engine_settings"])
    assert "max_model_len: 131072 (unset: the model's context) is above the KV cache capacity" in message
    assert "52192 tokens (3262 blocks × 16)" in message
    assert "vLLM refuses to start: To serve at least one request with the models's max seq len (131072)" in message
    assert "estimated maximum model length is 52192" in message


def test_low_headroom_is_accepted_with_a_warning_in_the_response(post, catalog):
    # 52,192 / 16,384 = 3.19 sequences at max_model_len: fewer than 4.
    response = post(body(catalog, max_model_len=16384))
    assert response.status_code == 201, response.content
    assert response.json()["warnings"] == [
        "Low headroom on the engine pool (1 × L4 (TP 1)): the KV cache holds 52192 tokens, 3.19 sequences of "
        "max_model_len 16384 (fewer than 4); requests queue or are preempted under load. Lower max_model_len, use "
        "fp8 KV cache or more GPUs."
    ]


def test_enough_headroom_has_no_warning(post, catalog):
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192))
    assert response.status_code == 201 and response.json()["warnings"] == []


def test_tensor_parallel_across_the_pools_gpus_is_planned(post, catalog):
    # 70B at TP 8 on eight L4s: weights 17,650,000,000 B per GPU; KV/token 40,960 B, block 655,360 B;
    # budget 23,708,219,473.92 - 17,650,000,000 - 2048 x 8192 x 32 (536,870,912) - 536,870,912 = 4,984,477,649 B
    # → 7605 blocks = 121,680 tokens, 14.85 sequences of 8192: admitted without a warning.
    response = post(body(catalog, model="llama70", gpus=8, max_model_len=8192, tensor_parallel_size=8))
    assert response.status_code == 201, response.content
    assert response.json()["warnings"] == []


def test_the_model_clean_refuses_for_every_door(tenant_a, catalog):
    """The admin and the portal call the same `full_clean()`: no API needed to be refused."""
    service = InferenceService(tenant=tenant_a, name="direct", cluster=catalog["cluster"], model=catalog["llama70"],
                               runtime=catalog["vllm"], engine_settings={"max_model_len": 8192})
    service.stage_spec(pools=[Pool(role="engine", gpu_type="h100-sxm-80gb")], adapters=[])
    with pytest.raises(ValidationError) as info:
        service.full_clean()
    assert "weights need 131.5 GiB per GPU at TP 1; one H100 80GB has 80 GiB" in str(info.value.message_dict["pools"])


def test_the_service_page_shows_the_capacity_warning(client, viewer_a, tenant_a, catalog):
    service = InferenceServiceFactory(tenant=tenant_a, name="tight", cluster=catalog["cluster"],
                                      model=catalog["llama8"], runtime=catalog["vllm"],
                                      engine_settings={"max_model_len": 16384},
                                      pools=[{"role": "engine", "gpu_type": "l4-24gb"}])
    client.force_login(viewer_a)
    html = client.get(reverse("web:service", args=[service.tenant.slug, service.name])).content.decode()
    assert "Low headroom on the engine pool (1 × L4 (TP 1))" in html


def test_a_tensor_parallel_size_that_does_not_divide_the_heads_is_refused(post, catalog):
    # Llama 8B has 32 attention heads; 3 does not divide them (vLLM refuses to start).
    response = post(body(catalog, gpu_type="h100-sxm-80gb", gpus=3, max_model_len=8192, tensor_parallel_size=3))
    assert response.status_code == 400
    assert response.json()["engine_settings"] == [
        "tensor_parallel_size: Total number of attention heads (32) must be divisible by tensor parallel size (3)."
    ]


def test_a_70b_on_four_h100s_with_tp_unset_is_judged_at_tp_4_and_admitted(post, catalog):
    # 70.6e9 x 2 B / 4 = 32.9 GiB of weights per GPU, well inside one H100's 80 GiB.
    response = post(body(catalog, model="llama70", gpu_type="h100-sxm-80gb", gpus=4, max_model_len=8192))
    assert response.status_code == 201, response.content
    assert "tensor_parallel_size" not in response.json()["engine_settings"]


def test_an_explicit_tp_1_on_four_h100s_runs_data_parallel_and_is_judged_at_tp_1(post, catalog):
    # vLLM serves the spare GPUs as 4 data-parallel ranks of TP 1, each holding all 131.5 GiB of weights.
    response = post(body(catalog, model="llama70", gpu_type="h100-sxm-80gb", gpus=4, max_model_len=8192,
                         tensor_parallel_size=1))
    assert response.status_code == 400
    message = " ".join(response.json()["pools"])
    assert "weights need 131.5 GiB per GPU at TP 1" in message
    assert "needs ≥ 2 × H100" in message  # 65.8 GiB per GPU at TP 2


def test_gpus_a_non_vllm_engine_would_leave_idle_are_refused_on_tensor_parallel_size(post, catalog):
    data = body(catalog, gpus=4, tensor_parallel_size=2)
    data["runtime"] = RuntimeFactory(name="sglang", engine="sglang").pk
    response = post(data)
    assert response.status_code == 400
    message = " ".join(response.json()["engine_settings"])
    assert message.startswith("tensor_parallel_size: engine pool: tensor_parallel_size 2 × pipeline_parallel_size 1 "
                              "uses 2 of the 4 GPU(s) of a replica")
    assert not InferenceService.objects.exists()


def test_a_draft_model_takes_its_weights_and_kv_off_the_capacity(post, catalog):
    # Alone, Llama 8B on one L4 holds 52,192 tokens (above), so a 32,768 context fits. A 1B draft (speculative
    # decoding) loads 1.24e9 x 2 B beside it and keeps 2 x 16 layers x 8 x 64 x 2 = 32,768 B of KV a token beside
    # the model's 131,072: (52,192 x 131,072 - 2.48e9) / 163,840 = 26,617 tokens, 1,663 or 1,664 whole blocks
    # (the budget is 3,262 blocks and up to one more).
    assert post(body(catalog, max_model_len=32768)).status_code == 201
    ModelFactory(name="llama-3-2-1b", source_uri="hf://meta-llama/Llama-3.2-1B-Instruct@main",
                 parameters_billions=1.24, layers=16, hidden_size=2048, kv_heads=8, head_dim=64)
    data = body(catalog, max_model_len=32768, speculative_model="llama-3-2-1b", num_speculative_tokens=4)
    data["name"] = "drafted"
    response = post(data)
    assert response.status_code == 400
    [message] = response.json()["engine_settings"]
    assert message.startswith("max_model_len: 32768 is above the KV cache capacity")
    assert "26608 tokens (1663 blocks × 16)" in message or "26624 tokens (1664 blocks × 16)" in message
    assert not InferenceService.objects.filter(name="drafted").exists()
