"""What more CPU memory would buy (apps/gateway/kv_reuse.py, `GET /api/v1/services/{id}/kv-reuse/`), from usage
rows whose prefix blocks are laid out so that the curve can be worked by hand.

P prompts of K chunks each (64 characters, 16 tokens: 4 characters a token) are sent in turn, N times in all.
Every block is then reused after the P x K - 1 other blocks of one round: an LRU of P x K chunks or more hits
all but the last block of every prompt after the first round, a smaller one hits nothing. P x K is set to 1.5
times the GPU cache of one replica (from the planner), so no tier hits nothing, and a tier of 2x the GPU cache
holds every prompt.
"""

from __future__ import annotations

import pytest

from apps.gateway.kv_reuse import service_reuse
from tests.factories import InferenceServiceFactory
from tests.gateway.reuse_rows import CHARS_PER_TOKEN, GIB, N, P, gpu_cache, layout, make_service, send_rounds


def test_no_tier_hits_nothing_and_a_tier_twice_the_gpu_cache_would_hold_every_prompt(tenant_a):
    service = make_service(tenant_a)
    k = layout(service)
    send_rounds(service, k)

    found = service_reuse(service)

    plan = gpu_cache(service)
    by_label = {s["label"]: s for s in found["sizes"]}
    assert found["requests"] == N and found["chars_per_token"] == CHARS_PER_TOKEN
    assert by_label["current"]["cpu_tier_gib"] == 0 and by_label["current"]["hit_rate"] == 0
    assert by_label["0.5x"]["hit_rate"] == 0  # a tier smaller than the GPU cache adds nothing
    everything = round((N - P) / N * (k - 1) / k, 4)  # the first round misses; the last block is computed
    assert by_label["2x"]["hit_rate"] == by_label["4x"]["hit_rate"] == everything
    assert by_label["2x"]["cpu_hit_rate"] == everything and by_label["2x"]["gpu_hit_rate"] == 0
    # 2x is twice the GPU cache in GiB per GPU of host memory.
    assert by_label["2x"]["cpu_tier_gib"] == round(2 * plan.max_tokens * plan.kv_bytes_per_token / GIB, 2)
    # The knee: the reuse distance P x K chunks (of 16 tokens), as GiB per GPU.
    assert found["knee_gib"] == round(P * k * 16 * plan.kv_bytes_per_token / GIB, 2)
    # TTFT: 20 s measured at the current size (the prompts are about 17,000 tokens); loading all but the last
    # block instead of computing them saves most of the prefill, which alone takes seconds on an L4.
    assert by_label["current"]["ttft_p95_s"] == 20.0 and by_label["0.5x"]["ttft_p95_s"] == 20.0
    assert 0 < by_label["2x"]["ttft_p95_s"] < 20.0 - 2
    assert found["sentence"].startswith(f"{found['knee_gib']:.1f} GiB more CPU tier per GPU")
    assert f"from 0% to {everything:.0%}" in found["sentence"]
    assert found["ttft_by_tier"]["miss"]["requests"] == N and found["ttft_by_tier"]["cpu"]["requests"] == 0
    # Every block misses the GPU cache and is inserted; past its size each pushes one out, over N - 1 seconds.
    assert found["evicted_tokens_per_s"] == {"gpu": round((N * k * 16 - plan.max_tokens) / (N - 1), 1),
                                             "cpu_tier": None}


def test_with_a_tier_that_holds_the_prompts_its_hits_are_the_cpu_tiers_and_more_buys_nothing(tenant_a):
    probe = make_service(tenant_a, name="probe")
    plan = gpu_cache(probe)
    tier_gib = round(2 * plan.max_tokens * plan.kv_bytes_per_token / GIB, 1)
    service = make_service(tenant_a, tier_gib=tier_gib)
    k = layout(service)
    send_rounds(service, k)

    found = service_reuse(service)

    current = found["sizes"][0]
    assert (current["label"], current["cpu_tier_gib"]) == ("current", tier_gib)
    assert current["hit_rate"] == current["cpu_hit_rate"] == round((N - P) / N * (k - 1) / k, 4)
    assert found["ttft_by_tier"]["cpu"]["requests"] == N - P and found["ttft_by_tier"]["miss"]["requests"] == P
    assert found["ttft_by_tier"]["gpu"]["requests"] == 0
    # The GPU cache evicts every block into the tier, which holds them all and drops none.
    assert found["evicted_tokens_per_s"] == {"gpu": round((N * k * 16 - plan.max_tokens) / (N - 1), 1),
                                             "cpu_tier": 0.0}
    assert found["sentence"].startswith("More CPU memory would buy under 1 % more prefix hits")
    # The prompts need 1.5 GPU caches, the tier is 2: less would do.
    assert found["knee_gib"] == round(P * k * 16 * plan.kv_bytes_per_token / GIB, 2) < tier_gib
    assert found["sentence"].endswith(f"; {found['knee_gib']:.1f} GiB per GPU would hit within 1 % as often.")


def test_a_tier_beside_a_gpu_cache_that_holds_every_prompt_is_said_to_buy_nothing(tenant_a):
    service = make_service(tenant_a, tier_gib=8)
    k = layout(service, caches=0.5)
    send_rounds(service, k)

    found = service_reuse(service)

    current = found["sizes"][0]
    assert current["gpu_hit_rate"] == round((N - P) / N * (k - 1) / k, 4) and current["cpu_hit_rate"] == 0
    assert found["knee_gib"] == 0
    assert found["sentence"].endswith("and the GPU cache alone holds it: the tier buys under 1 % of hits.")
    assert found["ttft_by_tier"]["gpu"]["requests"] == N - P


def test_a_prefill_decode_service_is_read_at_its_prefill_pools_cache(tenant_a):
    l4 = make_service(tenant_a, name="probe")
    service = InferenceServiceFactory(tenant=tenant_a, name="pd", deployment_mode="pd_disaggregated",
                                      engine_settings={"max_model_len": 8192},
                                      pools=[{"role": "decode", "gpu_type": "h100-sxm-80gb"},
                                             {"role": "prefill", "gpu_type": "l4-24gb"}])
    send_rounds(service, layout(l4))

    assert service_reuse(service)["gpu_cache_tokens"] == gpu_cache(l4).max_tokens  # the L4's, not the H100's


def test_too_few_requests_say_nothing(tenant_a):
    service = make_service(tenant_a)
    assert service_reuse(service) is None


@pytest.mark.parametrize("actor, status", [("viewer_a", 200), ("member_b", 404), ("staff", 200)])
def test_the_api_is_scoped_like_the_services(api, tenant_a, actor, status):
    service = make_service(tenant_a)
    send_rounds(service, layout(service))

    response = api(actor).get(f"/api/v1/services/{service.pk}/kv-reuse/")

    assert response.status_code == status
    if status == 200:
        data = response.json()
        assert data["available"] is True
        assert [s["label"] for s in data["sizes"]] == ["current", "0.5x", "2x", "4x"]
        assert set(data["ttft_by_tier"]) == {"gpu", "cpu", "miss"}


def test_the_api_says_when_there_is_no_estimate(api, tenant_a):
    service = make_service(tenant_a)
    assert api("viewer_a").get(f"/api/v1/services/{service.pk}/kv-reuse/").json() == {"available": False}
