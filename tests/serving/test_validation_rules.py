"""Each rule of issue 2 item 3 rejects a service through the API with the field named, and writes
nothing: no service, pool or audit row appears."""

from __future__ import annotations

import copy

import pytest

from apps.core.models import AuditEntry
from apps.serving.models import InferenceService, Pool
from apps.tenancy.queues import set_gpu_quota
from tests.factories import AdapterFactory, ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory


@pytest.fixture
def catalog(tenant_a, tenant_b):
    return {
        "cluster": ClusterFactory(name="sim"),
        "model": ModelFactory(name="llama-8b"),
        "other_model": ModelFactory(name="qwen-7b", max_context=32768),
        "vllm": RuntimeFactory(name="vllm", supported_modes=["standard", "pd_disaggregated", "multi_node"]),
        "sglang": RuntimeFactory(name="sglang", engine="sglang", image="lmsysorg/sglang", tag="v0.5.23"),
        "b_model": ModelFactory(tenant=tenant_b, name="bravo-private"),
    }


def valid_payload(catalog) -> dict:
    return {
        "tenant": "alpha",
        "name": "chat",
        "cluster": "sim",
        "model": catalog["model"].pk,
        "runtime": catalog["vllm"].pk,
        "deployment_mode": "standard",
        "engine_settings": {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"},
        "pools": [{"role": "engine", "replicas": 2, "min_replicas": 1, "max_replicas": 4, "gpus_per_replica": 2}],
    }


def counts() -> tuple[int, int, int]:
    return InferenceService.objects.count(), Pool.objects.count(), AuditEntry.objects.count()


def post(client, payload):
    before = counts()
    response = client.post("/api/v1/services/", payload, format="json")
    assert counts() == before, "a rejected request wrote rows"
    return response


def test_the_valid_payload_is_accepted(api, catalog, owner_a):
    # Guards the rule tests below: each one breaks exactly one thing in this payload.
    response = api("owner_a").post("/api/v1/services/", valid_payload(catalog), format="json")
    assert response.status_code == 201, response.content


def mutate(payload, path, value):
    target = payload
    *parents, last = path
    for key in parents:
        target = target[key]
    target[last] = value
    return payload


RULES = [
    ("name is not a DNS-1123 label", ("name",), "Chat_Bot", "name", "DNS-1123"),
    ("min above replicas", ("pools", 0, "min_replicas"), 3, "pools", "min_replicas"),
    ("replicas above max", ("pools", 0, "replicas"), 5, "pools", "max_replicas"),
    ("no GPU per replica", ("pools", 0, "gpus_per_replica"), 0, "pools", "greater than or equal to 1"),
    ("GPUs not a multiple of TP x PP", ("pools", 0, "gpus_per_replica"), 3, "engine_settings",
     "tensor_parallel_size 2 × pipeline_parallel_size 1 uses 2 of the 3 GPU(s)"),
    ("mode the runtime lacks", ("deployment_mode",), "serverless", "deployment_mode", "does not support"),
    ("KV dtype vLLM rejects", ("engine_settings", "kv_cache_dtype"), "fp4_e2m1", "engine_settings", "kv_cache_dtype"),
    (
        "extra arg repeats an owned flag",
        ("engine_settings", "extra_args"),
        ["--max-model-len", "4096"],
        "engine_settings",
        "extra_args",
    ),
    (
        "max_model_len beyond the model",
        ("engine_settings", "max_model_len"),
        262144,
        "engine_settings",
        "max_model_len",
    ),
    ("cache_aware routing on vLLM", ("routing_policy",), "cache_aware", "routing_policy", "sglang"),
    ("pools that do not fit the mode", ("pools", 0, "role"), "prefill", "pools", "needs exactly the pools"),
    ("unknown autoscaler", ("autoscaling",), {"autoscaler": "magic"}, "autoscaling", "magic"),
]


@pytest.mark.parametrize(("rule", "path", "value", "field", "says"), RULES, ids=[r[0] for r in RULES])
def test_rule_rejects_with_the_field_named_and_writes_nothing(api, catalog, owner_a, rule, path, value, field, says):
    payload = mutate(copy.deepcopy(valid_payload(catalog)), path, value)
    response = post(api("owner_a"), payload)
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert says in str(response.json()[field])


def test_adapter_of_another_model_is_rejected(api, catalog, owner_a):
    lora = AdapterFactory(base_model=catalog["other_model"], name="qwen-lora")
    payload = valid_payload(catalog) | {"adapters": [lora.pk]}
    response = post(api("owner_a"), payload)
    assert response.status_code == 400
    assert "is for model 'qwen-7b'" in str(response.json()["adapters"])


def test_another_tenants_model_is_rejected_even_for_staff(api, catalog, staff):
    payload = valid_payload(catalog) | {"model": catalog["b_model"].pk}
    response = post(api("staff"), payload)
    assert response.status_code == 400
    assert "another tenant" in str(response.json()["model"])


def test_another_tenants_model_is_invisible_to_a_member(api, catalog, owner_a):
    payload = valid_payload(catalog) | {"model": catalog["b_model"].pk}
    response = post(api("owner_a"), payload)
    assert response.status_code == 400
    assert "does not exist" in str(response.json()["model"])


def test_name_clash_in_the_tenant_is_409(api, catalog, tenant_a, owner_a):
    InferenceServiceFactory(
        tenant=tenant_a, name="chat", cluster=catalog["cluster"], model=catalog["model"], runtime=catalog["vllm"]
    )
    response = post(api("owner_a"), valid_payload(catalog))
    assert response.status_code == 409
    assert "already exists" in str(response.json()["name"])


def test_the_same_name_in_another_tenant_is_fine(api, catalog, tenant_b, owner_a):
    InferenceServiceFactory(
        tenant=tenant_b, name="chat", cluster=catalog["cluster"], model=catalog["model"], runtime=catalog["vllm"]
    )
    assert api("owner_a").post("/api/v1/services/", valid_payload(catalog), format="json").status_code == 201


def test_quota_error_says_requested_used_and_allowed(api, catalog, tenant_a, owner_a):
    set_gpu_quota(tenant_a, 10)
    # Already used: max 3 replicas x 2 GPUs = 6.
    InferenceServiceFactory(
        tenant=tenant_a,
        name="existing",
        cluster=catalog["cluster"],
        model=catalog["model"],
        runtime=catalog["vllm"],
        pools=[{"max_replicas": 3, "gpus_per_replica": 2}],
    )
    # Requested: max 4 replicas x 2 GPUs = 8; 6 + 8 > 10.
    response = post(api("owner_a"), valid_payload(catalog))
    assert response.status_code == 400
    message = str(response.json()["pools"])
    assert "requested 8 GPUs" in message
    assert "6 already used" in message
    assert "10 allowed" in message


def test_quota_counts_multi_node_replicas_by_their_nodes(api, catalog, tenant_a, owner_a):
    set_gpu_quota(tenant_a, 16)
    payload = valid_payload(catalog) | {
        "deployment_mode": "multi_node",
        "engine_settings": {"tensor_parallel_size": 8, "pipeline_parallel_size": 2},
        "pools": [
            {
                "role": "leader",
                "replicas": 1,
                "min_replicas": 1,
                "max_replicas": 2,
                "gpus_per_replica": 8,
                "nodes_per_replica": 2,
            }
        ],
    }
    response = post(api("owner_a"), payload)
    assert response.status_code == 400
    assert "requested 32 GPUs" in str(response.json()["pools"])
    payload["pools"][0]["max_replicas"] = 1
    assert api("owner_a").post("/api/v1/services/", payload, format="json").status_code == 201


def test_update_that_breaks_a_rule_leaves_the_service_unchanged(api, catalog, tenant_a, owner_a):
    service = InferenceServiceFactory(
        tenant=tenant_a, name="chat", cluster=catalog["cluster"], model=catalog["model"], runtime=catalog["vllm"]
    )
    audit_before = AuditEntry.objects.count()
    response = api("owner_a").patch(
        f"/api/v1/services/{service.pk}/",
        {"routing_policy": "session", "pools": [{"role": "engine", "replicas": 9, "max_replicas": 4}]},
        format="json",
    )
    assert response.status_code == 400
    service.refresh_from_db()
    assert service.routing_policy == "round_robin"
    assert service.pools.get().replicas == 1
    assert (service.version, service.generation) == (1, 1)
    assert AuditEntry.objects.count() == audit_before


def test_sglang_accepts_cache_aware_routing_and_its_own_kv_dtype(api, catalog, owner_a):
    payload = valid_payload(catalog) | {
        "runtime": catalog["sglang"].pk,
        "routing_policy": "cache_aware",
        "engine_settings": {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8_e4m3"},
    }
    response = api("owner_a").post("/api/v1/services/", payload, format="json")
    assert response.status_code == 201, response.content


def test_a_routing_policy_the_engines_router_lacks_is_a_400_not_a_failed_reconcile(api, catalog, owner_a):
    # Found by the rendering property test: SGLang's router has no session affinity; the renderer refused
    # it only at reconcile time.
    payload = valid_payload(catalog) | {"runtime": catalog["sglang"].pk, "routing_policy": "session"}
    response = api("owner_a").post("/api/v1/services/", payload, format="json")
    assert response.status_code == 400
    message = " ".join(response.json()["routing_policy"])
    assert "no session routing" in message and "cache_aware, kv_aware, prefix_aware, round_robin" in message
