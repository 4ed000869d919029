"""Engine settings and the per-engine adapters: validation rules and the exact flags of each engine.

Expected flags are written from reference/engines.md §3, not taken from the code's output.
"""

import json

import pytest

from apps.catalog.engines import (
    EngineSettings,
    EngineSettingsError,
    LoraAdapter,
    MultiNode,
    get_adapter,
)
from enginevocab.bounds import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS

VLLM = get_adapter("vllm")
SGLANG = get_adapter("sglang")


# --- EngineSettings.from_dict / to_dict -------------------------------------------------------------

def test_from_dict_reads_every_field_and_round_trips():
    data = {
        "max_model_len": 8192, "kv_cache_dtype": "fp8", "enable_prefix_caching": True,
        "enable_chunked_prefill": False, "gpu_memory_utilization": 0.9, "max_num_seqs": 128,
        "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "quantization": "awq",
        "speculative_model": "org/draft", "num_speculative_tokens": 4, "extra_args": ["--seed", "7"],
    }
    settings = EngineSettings.from_dict(data)
    assert settings.max_model_len == 8192
    assert settings.extra_args == ("--seed", "7")
    assert settings.to_dict() == data
    assert EngineSettings.from_dict(settings.to_dict()) == settings


def test_empty_settings_leave_tp_to_the_replicas_gpus_and_omit_engine_defaults():
    assert EngineSettings.from_dict({}) == EngineSettings()
    assert EngineSettings.from_dict(None).tensor_parallel_size is None  # capacity.parallel derives it
    assert EngineSettings().to_dict() == {"pipeline_parallel_size": 1}


def test_from_dict_rejects_unknown_keys_with_a_field_error():
    with pytest.raises(EngineSettingsError) as exc:
        EngineSettings.from_dict({"max_model_len": 4096, "block_size": 16})
    assert exc.value.errors == {"block_size": "unknown engine setting 'block_size'"}


def test_from_dict_rejects_wrong_types_per_field():
    with pytest.raises(EngineSettingsError) as exc:
        EngineSettings.from_dict({
            "max_model_len": "4096", "enable_prefix_caching": "yes", "max_num_seqs": True,
            "gpu_memory_utilization": "0.9", "extra_args": ["--seed", 7], "tensor_parallel_size": None,
        })
    assert exc.value.errors == {
        "max_model_len": "must be an integer",
        "enable_prefix_caching": "must be true or false",
        "max_num_seqs": "must be an integer",
        "gpu_memory_utilization": "must be a number",
        "extra_args": "must be a list of strings",
        "tensor_parallel_size": "must be an integer",
    }


def test_from_dict_rejects_a_non_object():
    with pytest.raises(EngineSettingsError):
        EngineSettings.from_dict(["--max-model-len", "4096"])


def test_integer_gpu_memory_utilization_is_read_as_a_number():
    assert EngineSettings.from_dict({"gpu_memory_utilization": 1}).gpu_memory_utilization == 1.0


# --- validate ---------------------------------------------------------------------------------------

def test_valid_settings_have_no_errors_on_either_engine():
    settings = EngineSettings(max_model_len=4096, gpu_memory_utilization=1.0, max_num_seqs=64)
    assert VLLM.validate(settings) == {}
    assert SGLANG.validate(settings) == {}


@pytest.mark.parametrize("dtype", ["auto", "fp8", "fp8_e5m2", "nvfp4"])
def test_vllm_accepts_its_kv_cache_dtypes(dtype):
    assert VLLM.validate(EngineSettings(kv_cache_dtype=dtype)) == {}


@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3", "bf16", "nvfp4"])
def test_sglang_accepts_its_kv_cache_dtypes(dtype):
    assert SGLANG.validate(EngineSettings(kv_cache_dtype=dtype)) == {}


def test_plain_fp8_kv_cache_is_a_vllm_spelling_that_sglang_rejects():
    errors = SGLANG.validate(EngineSettings(kv_cache_dtype="fp8"))
    assert set(errors) == {"kv_cache_dtype"}
    assert errors["kv_cache_dtype"].startswith("'fp8' is not a KV-cache dtype sglang accepts (auto, bf16")


def test_bf16_kv_cache_is_an_sglang_spelling_that_vllm_rejects():
    errors = VLLM.validate(EngineSettings(kv_cache_dtype="bf16"))
    assert errors["kv_cache_dtype"].startswith("'bf16' is not a KV-cache dtype vllm accepts (auto, ")


@pytest.mark.parametrize("value", [0.0, -0.5, 1.01, float("nan")])
def test_gpu_memory_utilization_must_be_in_zero_one(value):
    errors = VLLM.validate(EngineSettings(gpu_memory_utilization=value))
    assert errors == {"gpu_memory_utilization": "must be greater than 0 and at most 1"}


def test_numeric_ranges():
    errors = SGLANG.validate(EngineSettings(
        max_model_len=0, max_num_seqs=0, tensor_parallel_size=0, pipeline_parallel_size=-1,
    ))
    assert errors == {
        "max_model_len": "must be at least 1",
        "max_num_seqs": f"must be between 1 and {MAX_NUM_SEQS}",
        "tensor_parallel_size": "must be at least 1",
        "pipeline_parallel_size": "must be at least 1",
    }


def test_max_model_len_cannot_exceed_the_models_context():
    errors = VLLM.validate(EngineSettings(max_model_len=65536), max_context=32768)
    assert errors == {"max_model_len": "exceeds the model's maximum context of 32768 tokens"}
    assert VLLM.validate(EngineSettings(max_model_len=32768), max_context=32768) == {}


def test_speculative_model_and_token_count_come_together():
    assert VLLM.validate(EngineSettings(speculative_model="org/draft")) == {
        "num_speculative_tokens": "is required when speculative_model is set"}
    assert VLLM.validate(EngineSettings(num_speculative_tokens=3)) == {
        "speculative_model": "is required when num_speculative_tokens is set"}
    assert VLLM.validate(EngineSettings(speculative_model="org/draft", num_speculative_tokens=17)) == {
        "num_speculative_tokens": "must be between 1 and 16"}


def test_quantization_must_look_like_a_method_name():
    assert VLLM.validate(EngineSettings(quantization="awq --foo")) == {
        "quantization": "must be a quantization method name such as awq, gptq or fp8"}


def test_extra_args_may_not_repeat_a_structured_setting():
    errors = VLLM.validate(EngineSettings(extra_args=["--max-model-len", "4096", "--seed", "1"]))
    assert errors == {
        "extra_args": "--max-model-len repeats the max_model_len setting; set max_model_len instead"}


def test_extra_args_owned_flag_in_equals_spelling():
    errors = SGLANG.validate(EngineSettings(extra_args=["--mem-fraction-static=0.8"]))
    assert errors == {"extra_args": "--mem-fraction-static repeats the gpu_memory_utilization setting; "
                                    "set gpu_memory_utilization instead"}


@pytest.mark.parametrize("token,owner", [
    ("-tp", "tensor_parallel_size"),
    ("-pp=2", "pipeline_parallel_size"),
    ("--no-enable-prefix-caching", "enable_prefix_caching"),
    ("--max_num_seqs=8", "max_num_seqs"),  # vLLM reads underscores as dashes
    ("-q", "quantization"),
    ("--spec-tokens", "speculative_model"),
])
def test_vllm_extra_args_aliases_are_recognised(token, owner):
    # A switch or an `=` spelling leaves "2" as a positional, refused on its own; the flag still names its owner.
    errors = VLLM.validate(EngineSettings(extra_args=[token, "2"]))
    assert f"repeats the {owner} setting; set {owner} instead" in errors["extra_args"]


@pytest.mark.parametrize("token,owner", [
    ("--tensor-parallel-size=2", "tensor_parallel_size"),
    ("--tp-size=2", "tensor_parallel_size"),
    ("--disable-radix-cache", "enable_prefix_caching"),
    ("--chunked-prefill-size=-1", "enable_chunked_prefill"),
    ("--context-length=4096", "max_model_len"),
    ("--max-running-requests=8", "max_num_seqs"),
])
def test_sglang_extra_args_aliases_are_recognised(token, owner):
    errors = SGLANG.validate(EngineSettings(extra_args=[token]))
    assert errors["extra_args"].startswith(token.split("=")[0])
    assert errors["extra_args"].endswith(f" repeats the {owner} setting; set {owner} instead")
    assert errors["extra_args"].count(" repeats ") == 1 and "expects" not in errors["extra_args"]


def test_extra_args_may_not_override_control_plane_flags():
    assert VLLM.validate(EngineSettings(extra_args=["--port=9000"])) == {
        "extra_args": "--port is set by the control plane"}
    assert SGLANG.validate(EngineSettings(extra_args=["--host", "127.0.0.1", "--enable-lora"])) == {
        "extra_args": "--host is set by the control plane; --enable-lora is set by the control plane"}


def test_negative_numbers_in_extra_args_are_values_not_flags():
    # Read as the value of the flag (then bounded), not as a flag of its own.
    assert SGLANG.validate(EngineSettings(extra_args=["--schedule-conservativeness", "-1"])) == {
        "extra_args": "--schedule-conservativeness must be between 0 and 10"}


def test_an_unrelated_flag_is_allowed_remote_code_and_empty_args_are_not():
    assert VLLM.validate(EngineSettings(extra_args=["--enforce-eager", "--seed", "7"])) == {}
    assert VLLM.validate(EngineSettings(extra_args=["--trust-remote-code"])) == {
        "extra_args": "--trust-remote-code is platform-only (it runs the model repository's own Python code); "
                      "ask staff for a Runtime that sets it"}
    assert VLLM.validate(EngineSettings(extra_args=[" "])) == {
        "extra_args": "empty arguments are not allowed"}


def test_owned_flags_map_spellings_to_their_setting():
    assert VLLM.owned_flags()["--gpu-memory-utilization"] == "gpu_memory_utilization"
    assert SGLANG.owned_flags()["--mem-fraction-static"] == "gpu_memory_utilization"
    assert "--disable-radix-cache" not in VLLM.owned_flags()


# --- flags ------------------------------------------------------------------------------------------

def test_vllm_flags_from_every_setting():
    settings = EngineSettings(
        max_model_len=16384, kv_cache_dtype="fp8", enable_prefix_caching=False, enable_chunked_prefill=True,
        gpu_memory_utilization=0.85, max_num_seqs=256, tensor_parallel_size=4, pipeline_parallel_size=2,
        quantization="fp8", extra_args=["--seed", "1"],
    )
    flags = VLLM.flags(settings, model_path="/models/llama", served_name="chat", port=8000,
                       default_args=["--disable-fastapi-docs"])
    assert flags == [
        "--model", "/models/llama", "--served-model-name", "chat", "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--max-model-len", "16384",
        "--kv-cache-dtype", "fp8", "--no-enable-prefix-caching", "--enable-chunked-prefill",
        "--gpu-memory-utilization", "0.85", "--max-num-seqs", "256", "--quantization", "fp8",
        "--disable-fastapi-docs", "--seed", "1",
    ]


def test_sglang_flags_from_every_setting_always_bind_all_interfaces_and_enable_metrics():
    settings = EngineSettings(
        max_model_len=16384, kv_cache_dtype="fp8_e4m3", enable_prefix_caching=False,
        enable_chunked_prefill=False, gpu_memory_utilization=0.85, max_num_seqs=256,
        tensor_parallel_size=4, pipeline_parallel_size=2, quantization="fp8",
    )
    flags = SGLANG.flags(settings, model_path="/models/llama", served_name="chat")
    assert flags == [
        "--model-path", "/models/llama", "--served-model-name", "chat", "--host", "0.0.0.0",
        "--port", "30000", "--enable-metrics", "--tp-size", "4", "--pp-size", "2",
        "--context-length", "16384", "--kv-cache-dtype", "fp8_e4m3", "--disable-radix-cache",
        "--chunked-prefill-size", "-1", "--mem-fraction-static", "0.85", "--max-running-requests", "256",
        "--quantization", "fp8",
    ]


def test_engine_defaults_add_no_flags():
    assert VLLM.flags(EngineSettings(), model_path="/m", served_name="s") == [
        "--model", "/m", "--served-model-name", "s", "--host", "0.0.0.0", "--port", "8000"]
    # Radix cache and chunked prefill are on by default in SGLang: enabling them adds nothing.
    on = EngineSettings(enable_prefix_caching=True, enable_chunked_prefill=True)
    assert SGLANG.flags(on, model_path="/m", served_name="s") == [
        "--model-path", "/m", "--served-model-name", "s", "--host", "0.0.0.0", "--port", "30000",
        "--enable-metrics"]


def test_vllm_lora_adapters_and_rank_rounded_up_to_an_allowed_choice():
    adapters = [LoraAdapter("sql", "/models/adapters/sql", 8),
                LoraAdapter("tone", "/models/adapters/tone", 24)]
    flags = VLLM.flags(EngineSettings(), model_path="/m", served_name="s", adapters=adapters)
    assert flags[8:] == [
        "--enable-lora", "--lora-modules", "sql=/models/adapters/sql", "tone=/models/adapters/tone",
        "--max-lora-rank", "32", "--max-loras", "2",
    ]


def test_sglang_lora_adapters():
    flags = SGLANG.flags(EngineSettings(), model_path="/m", served_name="s",
                         adapters=[LoraAdapter("sql", "/models/adapters/sql", 8)])
    assert flags[9:] == ["--enable-lora", "--lora-paths", "sql=/models/adapters/sql"]


def test_vllm_prefill_and_decode_kv_transfer_roles():
    prefill = VLLM.flags(EngineSettings(), model_path="/m", served_name="s", role="prefill")
    decode = VLLM.flags(EngineSettings(), model_path="/m", served_name="s", role="decode")
    assert prefill[8] == decode[8] == "--kv-transfer-config"
    assert json.loads(prefill[9]) == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert json.loads(decode[9]) == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}


def test_sglang_prefill_gets_the_bootstrap_port_and_decode_does_not():
    prefill = SGLANG.flags(EngineSettings(), model_path="/m", served_name="s", role="prefill")
    decode = SGLANG.flags(EngineSettings(), model_path="/m", served_name="s", role="decode")
    assert prefill[9:] == ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "8998"]
    assert decode[9:] == ["--disaggregation-mode", "decode"]


def test_unknown_role_is_refused():
    with pytest.raises(ValueError):
        VLLM.flags(EngineSettings(), model_path="/m", served_name="s", role="leader")
    with pytest.raises(ValueError):
        SGLANG.flags(EngineSettings(), model_path="/m", served_name="s", role="router")


def test_speculative_decoding_flags():
    settings = EngineSettings(speculative_model="org/draft", num_speculative_tokens=4)
    vllm = VLLM.flags(settings, model_path="/m", served_name="s")
    assert vllm[8] == "--speculative-config"
    assert json.loads(vllm[9]) == {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4}
    assert SGLANG.flags(settings, model_path="/m", served_name="s")[9:] == [
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "org/draft",
        "--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "5",
    ]


def test_multi_node_flags_for_leader_and_worker():
    leader = MultiNode("$(LWS_GROUP_SIZE)", "$(LWS_WORKER_INDEX)", "$(LWS_LEADER_ADDRESS)", 29500, True)
    worker = MultiNode("$(LWS_GROUP_SIZE)", "$(LWS_WORKER_INDEX)", "$(LWS_LEADER_ADDRESS)", 29500, False)
    assert VLLM.flags(EngineSettings(), model_path="/m", served_name="s", multi_node=worker)[8:] == [
        "--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", "29500", "--headless"]
    leader_flags = VLLM.flags(EngineSettings(), model_path="/m", served_name="s", multi_node=leader)
    assert "--headless" not in leader_flags and "--nnodes" in leader_flags
    assert SGLANG.flags(EngineSettings(), model_path="/m", served_name="s", multi_node=leader)[9:] == [
        "--dist-init-addr", "$(LWS_LEADER_ADDRESS):29500", "--nnodes", "$(LWS_GROUP_SIZE)",
        "--node-rank", "$(LWS_WORKER_INDEX)"]


def test_endpoints_and_ports_per_engine():
    assert (VLLM.port, VLLM.health_path, VLLM.readiness_path) == (8000, "/health", "/health")
    assert (SGLANG.port, SGLANG.health_path, SGLANG.readiness_path) == (30000, "/health", "/ready")
    assert SGLANG.bootstrap_port == 8998


def test_unknown_engine_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        get_adapter("tgi")


# --- max_num_batched_tokens ---------------------------------------------------------------------------

def test_max_num_batched_tokens_is_vllms_step_budget_and_sglangs_prefill_chunk():
    settings = EngineSettings.from_dict({"max_num_batched_tokens": 4096})
    assert settings.max_num_batched_tokens == 4096 and "max_num_batched_tokens" in settings.to_dict()
    assert VLLM.flags(settings, model_path="/m", served_name="s")[-2:] == ["--max-num-batched-tokens", "4096"]
    assert SGLANG.flags(settings, model_path="/m", served_name="s")[-2:] == ["--chunked-prefill-size", "4096"]
    assert VLLM.owned_flags()["--max-num-batched-tokens"] == "max_num_batched_tokens"
    assert VLLM.validate(EngineSettings(extra_args=("--max-num-batched-tokens", "8")))["extra_args"]


def test_max_num_batched_tokens_the_engines_would_refuse():
    assert VLLM.validate(EngineSettings(max_num_batched_tokens=0)) == {
        "max_num_batched_tokens": f"must be between 1 and {MAX_NUM_BATCHED_TOKENS}"}
    # Every running sequence needs a decode token in the step, so the budget covers max_num_seqs.
    assert VLLM.validate(EngineSettings(max_num_seqs=256, max_num_batched_tokens=128)) == {
        "max_num_batched_tokens": "must be at least max_num_seqs (256)"}
    assert VLLM.validate(EngineSettings(max_num_seqs=128, max_num_batched_tokens=128)) == {}
    # Unchunked, a prompt is one step: the budget must hold the longest.
    assert VLLM.validate(EngineSettings(enable_chunked_prefill=False, max_model_len=8192,
                                        max_num_batched_tokens=4096)) == {
        "max_num_batched_tokens": "must be at least max_model_len (8192) without chunked prefill"}
    # SGLang's chunk size and "chunking off" are the same flag.
    refused = SGLANG.validate(EngineSettings(enable_chunked_prefill=False, max_num_batched_tokens=4096))
    assert list(refused) == ["max_num_batched_tokens"] and "--chunked-prefill-size" in refused["max_num_batched_tokens"]


# --- speculative decoding: n-gram ----------------------------------------------------------------------

def test_ngram_speculative_decoding_is_vllms_speculative_config_without_a_model():
    settings = EngineSettings.from_dict({"speculative_method": "ngram", "num_speculative_tokens": 3})
    assert VLLM.validate(settings) == {}
    flags = VLLM.flags(settings, model_path="/m", served_name="s")
    assert flags[8] == "--speculative-config"
    assert json.loads(flags[9]) == {"method": "ngram", "num_speculative_tokens": 3}  # engines.md §3
    assert settings.to_dict() == {"speculative_method": "ngram", "num_speculative_tokens": 3,
                                  "pipeline_parallel_size": 1}


def test_ngram_takes_no_model_needs_a_token_count_and_is_vllm_only():
    assert VLLM.validate(EngineSettings(speculative_method="ngram", speculative_model="org/draft",
                                        num_speculative_tokens=3)) == {
        "speculative_model": "must be unset with the ngram method, which drafts from the prompt"}
    assert VLLM.validate(EngineSettings(speculative_method="ngram")) == {
        "num_speculative_tokens": "is required with speculative_method ngram"}
    assert VLLM.validate(EngineSettings(speculative_method="medusa", num_speculative_tokens=3)) == {
        "speculative_method": "must be one of ngram, draft_model"}
    assert VLLM.validate(EngineSettings(speculative_method="draft_model", num_speculative_tokens=3)) == {
        "speculative_model": "is required when num_speculative_tokens is set"}
    assert SGLANG.validate(EngineSettings(speculative_method="ngram", num_speculative_tokens=3)) == {
        "speculative_method": "ngram is rendered for vLLM only; SGLang takes a draft model"}
