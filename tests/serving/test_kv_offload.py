"""The KV-cache CPU tier (`engine_settings.kv_offload`): the engines' real flags, the engines' refusals,
the pod's memory, and kubesim's parser accepting the rendered command line. Expected values by hand."""

from __future__ import annotations

import dataclasses

import pytest

from apps.catalog.engines import EngineSettings, EngineSettingsError, get_adapter
from apps.catalog.kvoffload import KvOffload
from apps.serving.models import InferenceService
from apps.serving.rendering import PoolSpec, render_service
from kubesim.engines.flags import parse_sglang, parse_vllm
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory
from tests.serving.golden.specs import SPECS

VLLM, SGLANG = get_adapter("vllm"), get_adapter("sglang")


def tail(adapter, settings, **extra):
    """The arguments after the model, served name, host and port (and SGLang's --enable-metrics)."""
    args = adapter.flags(settings, model_path="/models/m", served_name="m", **extra)
    return args[args.index("--port") + 2 + (adapter.kind == "sglang"):]


def test_vllm_native_renders_the_size_summed_over_the_tensor_parallel_ranks():
    settings = EngineSettings(tensor_parallel_size=2, kv_offload=KvOffload("native", 16))
    # vLLM divides --kv-offloading-size by TP x PP: 16 GiB per GPU on 2 GPUs is 32 GiB in all.
    assert tail(VLLM, settings) == ["--tensor-parallel-size", "2",
                                    "--kv-offloading-backend", "native", "--kv-offloading-size", "32.0"]


def test_vllm_lmcache_renders_its_backend_and_pipeline_ranks_count_too():
    settings = EngineSettings(pipeline_parallel_size=2, kv_offload=KvOffload("lmcache", 2.5))
    assert tail(VLLM, settings) == ["--pipeline-parallel-size", "2",
                                    "--kv-offloading-backend", "lmcache", "--kv-offloading-size", "5.0"]


def test_sglang_hicache_renders_whole_gigabytes_per_rank_and_write_through():
    settings = EngineSettings(kv_offload=KvOffload("hicache", 16))
    # 16 GiB = 17.18e9 bytes: 17 GB, rounded down so the tier stays inside what the pod asked for.
    assert tail(SGLANG, settings) == ["--enable-hierarchical-cache", "--hicache-size", "17",
                                      "--hicache-write-policy", "write_through"]


def test_settings_round_trip_and_off_when_absent():
    stored = {"kv_offload": {"backend": "native", "size_gib": 8}}
    assert EngineSettings.from_dict(stored).to_dict() == {**stored, "pipeline_parallel_size": 1}
    assert EngineSettings.from_dict({}).kv_offload is None
    assert "--kv-offloading-size" not in VLLM.flags(EngineSettings(), model_path="m", served_name="m")


@pytest.mark.parametrize(("value", "reason"), [
    ("native", "must be an object"),
    ({"backend": "native"}, "size_gib must be a number"),
    ({"backend": "native", "size_gib": True}, "size_gib must be a number"),
    ({"backend": "disk", "size_gib": 8}, "backend must be one of native, lmcache (vLLM) or hicache (SGLang)"),
    ({"backend": "native", "size_gib": 8, "ratio": 2}, "unknown key 'ratio'"),
])
def test_malformed_values_are_refused_with_the_reason(value, reason):
    with pytest.raises(EngineSettingsError) as refused:
        EngineSettings.from_dict({"kv_offload": value})
    assert reason in refused.value.errors["kv_offload"]


@pytest.mark.parametrize(("adapter", "kv", "prefix", "reason"), [
    (VLLM, KvOffload("hicache", 8), None, "backend 'hicache' is SGLang's HiCache; vllm takes native or lmcache"),
    (SGLANG, KvOffload("native", 8), None, "backend 'native' is vLLM's native offloading; sglang takes hicache"),
    (SGLANG, KvOffload("lmcache", 8), None, "backend 'lmcache' is vLLM's lmcache offloading; sglang takes hicache"),
    (VLLM, KvOffload("native", 0), None, "size_gib must be greater than 0"),
    (VLLM, KvOffload("native", -4), None, "size_gib must be greater than 0"),
    (VLLM, KvOffload("lmcache", 4096), None, "size_gib must be at most 1024 GiB per GPU"),
    (SGLANG, KvOffload("hicache", 0.5), None, "size_gib must be at least 1: SGLang's --hicache-size counts whole gigabytes"),
    (SGLANG, KvOffload("hicache", 8), False, "the CPU tier holds prefix-cache blocks; it needs enable_prefix_caching"),
    (VLLM, KvOffload("native", 8), False, "the CPU tier holds prefix-cache blocks; it needs enable_prefix_caching"),
])
def test_what_the_engines_refuse_is_refused_naming_the_reason(adapter, kv, prefix, reason):
    errors = adapter.validate(EngineSettings(kv_offload=kv, enable_prefix_caching=prefix))
    assert errors == {"kv_offload": reason}


@pytest.mark.parametrize(("adapter", "args"), [
    (VLLM, ["--kv-offloading-size", "8"]),
    (VLLM, ["--kv-offloading-backend=native"]),
    (SGLANG, ["--enable-hierarchical-cache"]),
    (SGLANG, ["--hicache-ratio", "2"]),
])
def test_tenants_cannot_pass_the_tier_flags_through_extra_args(adapter, args):
    errors = adapter.validate(EngineSettings(extra_args=tuple(args)))
    assert "repeats the kv_offload setting; set kv_offload instead" in errors["extra_args"]


def test_kubesim_parses_the_rendered_command_lines():
    vargs = VLLM.flags(EngineSettings(tensor_parallel_size=2, kv_offload=KvOffload("lmcache", 4)),
                       model_path="/models/m", served_name="m")
    ns, _ = parse_vllm([*VLLM.command, *vargs])
    assert (ns.kv_offloading_backend, ns.kv_offloading_size) == ("lmcache", 8.0)
    sargs = SGLANG.flags(EngineSettings(kv_offload=KvOffload("hicache", 30)), model_path="/models/m",
                         served_name="m")
    ns, _ = parse_sglang([*SGLANG.command, *sargs])
    # 30 GiB = 32.21e9 bytes: 32 GB.
    assert (ns.enable_hierarchical_cache, ns.hicache_size, ns.hicache_write_policy) == (True, 32, "write_through")


def _engine(objects, name="chat"):
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
    return deployment["spec"]["template"]["spec"]


def test_the_pod_asks_for_the_tier_and_its_overhead_and_limits_memory_with_shm():
    base = SPECS["standard-vllm"]()
    pool = PoolSpec("engine", 1, 1, 1, 2, "h100-sxm-80gb")
    settings = dataclasses.replace(base.settings, kv_offload=KvOffload("native", 40))
    spec = dataclasses.replace(base, has_gateway=False, pools=(pool,), settings=settings)
    pod = _engine(render_service(spec))
    resources = pod["containers"][0]["resources"]
    # 16 GiB per GPU for the process, plus (40 + 4 overhead (10 %)) x 2 GPUs = 88: 32 + 88 = 120 GiB;
    # the limit adds the 16 GiB memory-backed /dev/shm (8 per GPU), whose pages the pod is charged for.
    assert resources["requests"]["memory"] == "120Gi"
    assert resources["limits"] == {"memory": "136Gi", "nvidia.com/gpu": "2"}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    args = pod["containers"][0]["args"]
    assert args[args.index("--kv-offloading-size") + 1] == "80.0"


def test_a_small_tier_still_gets_one_gib_of_overhead_per_gpu():
    base = SPECS["standard-sglang"]()
    settings = dataclasses.replace(base.settings, kv_offload=KvOffload("hicache", 4))
    spec = dataclasses.replace(base, has_gateway=False, settings=settings)
    resources = _engine(render_service(spec))["containers"][0]["resources"]
    # One L40S per replica: 16 + (4 + 1) = 21 GiB; limit 21 + 8 of shm.
    assert (resources["requests"]["memory"], resources["limits"]["memory"]) == ("21Gi", "29Gi")


def test_without_the_tier_the_pod_has_no_memory_limit():
    resources = _engine(render_service(dataclasses.replace(SPECS["standard-vllm"](), has_gateway=False)))
    assert "memory" not in resources["containers"][0]["resources"]["limits"]


def test_node_allocatable_memory_and_the_largest_tier_that_fits():
    from apps.catalog.kvoffload import host_error
    from capacity.gpus import GPUS, node_allocatable_memory_gib
    # H100 SXM: 240 GiB per GPU; 8 GPUs = 1920 GiB, reserve 1 + min(19200 MiB, 4096 MiB) = 5 GiB.
    assert node_allocatable_memory_gib(GPUS["h100-sxm-80gb"], 8) == 1915
    # 8 x (16 + 200 + 20) = 1888 GiB fits in 1915; 8 x (16 + 205 + 20.5) = 1932 does not; 203 GiB per GPU is
    # the largest half GiB that fits: 128 + ceil(8 x 223.3) = 1915, while 203.5 asks 128 + ceil(8 x 223.85) = 1919.
    assert host_error(KvOffload("native", 200), gpus=8, gpu_short="H100", allocatable_gib=1915) is None
    refused = host_error(KvOffload("native", 205), gpus=8, gpu_short="H100", allocatable_gib=1915)
    assert refused.startswith("the engine container would request 1932 GiB")
    assert refused.endswith("more than the 1915.0 GiB a H100 node of 8 GPUs can allocate; at most 203 GiB per "
                            "GPU fits")


# -- through the API -----------------------------------------------------------------------------------

@pytest.fixture
def catalog(tenant_a):
    return {"cluster": ClusterFactory(name="sim"), "model": ModelFactory(name="llama-8b"),
            "vllm": RuntimeFactory(name="vllm", supported_modes=["standard", "pd_disaggregated"]),
            "sglang": RuntimeFactory(name="sglang", engine="sglang", image="lmsysorg/sglang", tag="v0.5.23",
                                     supported_modes=["standard", "pd_disaggregated"])}


def payload(catalog, kv, *, runtime="vllm", gpu_type="h100-sxm-80gb", mode="standard"):
    pools = ([{"role": r, "replicas": 1, "gpus_per_replica": 1, "gpu_type": gpu_type} for r in ("prefill", "decode")]
             if mode == "pd_disaggregated" else
             [{"role": "engine", "replicas": 1, "gpus_per_replica": 1, "gpu_type": gpu_type}])
    return {"tenant": "alpha", "name": "chat", "cluster": "sim", "model": catalog["model"].pk,
            "runtime": catalog[runtime].pk, "deployment_mode": mode,
            "engine_settings": {"kv_offload": kv}, "pools": pools}


@pytest.mark.parametrize(("kv", "extra", "message"), [
    ({"backend": "hicache", "size_gib": 8}, {}, "kv_offload: backend 'hicache' is SGLang's HiCache"),
    ({"backend": "native", "size_gib": 8}, {"runtime": "sglang"}, "kv_offload: backend 'native' is vLLM's"),
    ({"backend": "native", "size_gib": 0}, {}, "kv_offload: size_gib must be greater than 0"),
    # An L4 node has 32 GiB of host memory per GPU; the kubelet keeps 1 GiB + 320 MiB: 30.6875 GiB allocatable.
    # 16 + ceil(31.5 + 3.15) = 51 GiB does not fit; 12.5 GiB does (16 + ceil(12.5 + 1.25) = 30), 13 does not
    # (16 + ceil(13 + 1.3) = 31).
    ({"backend": "native", "size_gib": 31.5}, {"gpu_type": "l4-24gb"},
     "kv_offload: engine pool: the engine container would request 51 GiB (16 per GPU for the engine, plus 31.5 "
     "GiB per GPU and 3.15 of pinned-buffer overhead, for 1 GPU), more than the 30.7 GiB a L4 node of 1 GPU "
     "can allocate; at most 12.5 GiB per GPU fits"),
    ({"backend": "native", "size_gib": 8}, {"mode": "pd_disaggregated"},
     "kv_offload: vLLM's offloading takes the KV connector that disaggregated prefill/decode uses"),
    ({"backend": "hicache", "size_gib": 8}, {"mode": "pd_disaggregated", "runtime": "sglang"},
     "kv_offload: SGLang's decode server runs without the radix cache, which HiCache extends; a P/D service "
     "cannot have a CPU tier"),
])
def test_the_api_refuses_with_400_naming_engine_settings_kv_offload(api, catalog, owner_a, kv, extra, message):
    before = InferenceService.objects.count()
    response = api("owner_a").post("/api/v1/services/", payload(catalog, kv, **extra), format="json")
    assert response.status_code == 400, response.content
    assert any(m.startswith(message) for m in response.json()["engine_settings"]), response.json()
    assert InferenceService.objects.count() == before


def test_the_manifests_carry_the_engines_flags(api, catalog, owner_a):
    client = api("owner_a")
    created = client.post("/api/v1/services/", payload(catalog, {"backend": "lmcache", "size_gib": 24}),
                          format="json")
    assert created.status_code == 201, created.content
    assert created.json()["engine_settings"]["kv_offload"] == {"backend": "lmcache", "size_gib": 24}
    manifests = client.get(f"/api/v1/services/{created.json()['id']}/manifests/")
    assert manifests.status_code == 200, manifests.content
    text = manifests.content.decode()
    assert '"--kv-offloading-backend"' in text and '"lmcache"' in text and '"24.0"' in text


def test_kubesims_engines_start_with_the_rendered_tier():
    """kubesim's vLLM reports the tier in `cache_config_info`, as vLLM does; its SGLang starts with it."""
    from kubesim.engines import config, flags
    from kubesim.engines.harness import pod_context

    llama = "meta-llama/Llama-3.1-8B-Instruct"
    vargs = VLLM.flags(EngineSettings(max_model_len=8192, kv_offload=KvOffload("native", 8)), model_path=llama,
                       served_name="m")
    ctx = pod_context("vllm/vllm-openai:v0.33.0", [*VLLM.command, *vargs], gpu_count=1)
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    spec = config.vllm_spec(ns, ctx)
    assert spec.cache_info["kv_offloading_backend"] == "native" and spec.cache_info["kv_offloading_size"] == "8.0"
    sargs = SGLANG.flags(EngineSettings(max_model_len=8192, kv_offload=KvOffload("hicache", 8)), model_path=llama,
                         served_name="m")
    ctx = pod_context("lmsysorg/sglang:v0.5.23", [*SGLANG.command, *sargs], gpu_count=1)
    ns, _ = flags.parse_sglang(flags.command_line(ctx.container, ctx.env))
    assert ns.hicache_size == 8  # 8 GiB = 8.59e9 bytes: 8 GB
    # The engine starts with its GPU pool as without the tier (the second tier is not simulated yet).
    assert config.sglang_spec(ns, ctx).max_total_tokens > 0


def test_the_planner_counts_the_tier_in_tokens_as_each_engine_sizes_it():
    from capacity.gpus import GPUS
    from capacity.known import KNOWN_MODELS
    from capacity.plan import Knobs, plan

    llama = KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    # 131,072 bytes per token per GPU at TP 1 (2 x 32 x 8 x 128 x 2). vLLM: 20 GiB / 2 MiB blocks = 10,240
    # blocks = 163,840 tokens. SGLang: 20 GiB = 21.47e9 bytes -> --hicache-size 21 -> 21e9 // 131,072 = 160,217.
    vllm_plan = plan(llama, GPUS["h100-sxm-80gb"], 1, Knobs(cpu_tier_gib=20), search=False)
    sglang_plan = plan(llama, GPUS["h100-sxm-80gb"], 1, Knobs(engine="sglang", cpu_tier_gib=20), search=False)
    assert (vllm_plan.cpu_tier_tokens, sglang_plan.cpu_tier_tokens) == (163_840, 160_217)


@pytest.mark.parametrize(("layout", "kind"), [("mla", "multi-head latent attention"),
                                               ("hybrid", "mixes attention kinds")])
def test_vllm_offloading_is_refused_for_mla_and_hybrid_models_and_hicache_is_not(api, catalog, owner_a, layout, kind):
    catalog["model"] = ModelFactory(name=f"{layout}-model", kv_layout=layout)
    client = api("owner_a")
    for backend in ("native", "lmcache"):
        response = client.post("/api/v1/services/", payload(catalog, {"backend": backend, "size_gib": 8}),
                               format="json")
        assert response.status_code == 400, response.content
        message = response.json()["engine_settings"][0]
        assert message.startswith("kv_offload: vLLM's KV offloading moves one uniform layout") and kind in message
        assert message.endswith(f"(model {layout}-model: kv_layout {layout})")
    assert not InferenceService.objects.exists()
    accepted = client.post("/api/v1/services/", payload(catalog, {"backend": "hicache", "size_gib": 8},
                                                        runtime="sglang"), format="json")
    assert accepted.status_code == 201, accepted.content
