"""The engine-argument policy: extra args are read as the engine's argparse reads them, then judged."""

from __future__ import annotations

import pytest

from apps.catalog.engines import EngineSettings, LoraAdapter, MultiNode, get_adapter
from enginevocab import policy, sglang, vllm
from kubesim.engines.flags import parse_sglang, parse_vllm

VLLM = get_adapter("vllm")
SGLANG = get_adapter("sglang")
PLATFORM = "is platform-only"


@pytest.mark.parametrize("args,expected", [
    # The findings of the security review, each in the spelling that passed the exact-match check.
    (["--trust-remote-code"], f"--trust-remote-code {PLATFORM} (it runs the model repository's own Python code)"),
    (["--worker-extension-cls=os.system"], f"--worker-extension-cls {PLATFORM} (it loads Python code"),
    (["--tool-parser-plugin=/models/a/plugin.py"], f"--tool-parser-plugin {PLATFORM} (it loads Python code"),
    (["--served-model=x"], "--served-model (--served-model-name) is set by the control plane"),
    (["--download-d=/tmp"], f"--download-d (--download-dir) {PLATFORM} (it reads a file or path"),
    (["--kv-transfer-conf={}"], "--kv-transfer-conf (--kv-transfer-config) is set by the control plane"),
    (["--tp=8"], "--tp is not a flag of vllm 0.32.0"),
    (["--seed", "1", "other-org/other-model"], "'other-org/other-model' is a positional argument"),
    (["--trust_remote_code"], f"--trust_remote_code (--trust-remote-code) {PLATFORM}"),
    (["--no-trust-remote-code"], f"--no-trust-remote-code (--trust-remote-code) {PLATFORM}"),
    (["--tensor-parallel", "2"], "--tensor-parallel (--tensor-parallel-size) repeats the tensor_parallel_size"),
    (["-tp", "2"], "-tp (--tensor-parallel-size) repeats the tensor_parallel_size setting"),
    (["--enable"], "--enable is ambiguous (could be --enable-auto-tool-choice, "),
    (["--not-a-flag"], "--not-a-flag is not a flag of vllm 0.32.0"),
    (["--seed", "seven"], "--seed has an invalid value 'seven'"),
    (["--dtype=half8"], "--dtype must be one of auto, bfloat16, float, float16, float32, half"),
    (["--seed"], "--seed expects a value"),
    (["--enforce-eager=1"], "--enforce-eager takes no value"),
])
def test_vllm_tenant_args_are_refused_with_the_flag_and_reason(args, expected):
    errors = VLLM.validate(EngineSettings(extra_args=args))
    assert expected in errors["extra_args"]


@pytest.mark.parametrize("args,expected", [
    (["--trust-remote-code"], f"--trust-remote-code {PLATFORM}"),
    (["--tp", "2"], "--tp (--tp-size) repeats the tensor_parallel_size setting"),
    (["--model=other/model"], "--model (--model-path) is set by the control plane"),
    (["--served-model", "x"], "--served-model (--served-model-name) is set by the control plane"),
    (["--download", "/tmp"], f"--download (--download-dir) {PLATFORM}"),
    (["--worker-extension-cls=os.system"], "--worker-extension-cls is not a flag of sglang 0.5.23"),
    (["--tokenizer-path", "/etc"], f"--tokenizer-path {PLATFORM} (it reads a file or path inside the pod)"),
    (["--load-format", "runai_streamer"], "--load-format must be one of auto, safetensors, dummy, gguf"),
    (["--log-requests"], f"--log-requests {PLATFORM} (it writes prompts or outputs to the engine's logs)"),
])
def test_sglang_tenant_args_are_refused_with_the_flag_and_reason(args, expected):
    assert expected in SGLANG.validate(EngineSettings(extra_args=args))["extra_args"]


def test_tenant_settable_flags_pass_in_every_spelling():
    ok = ["--enforce-eager", "--seed=7", "--max-logprobs", "5", "--long_prefill_token_threshold", "2048",
          "--no-enable-prompt-tokens-details", "--ignore-patterns", "*.pt", "*.bin", "-ep", "-O3", "-O", "1",
          "--compilation", '{"mode": 3, "cudagraph_capture_sizes": [1, 2, 4]}']
    assert VLLM.validate(EngineSettings(extra_args=ok)) == {}
    assert SGLANG.validate(EngineSettings(extra_args=["--schedule-conservativeness", "0.5",
                                                      "--lora-target", "q_proj", "v_proj"])) == {}


def test_staff_may_set_platform_only_flags_on_a_runtime_but_not_owned_ones():
    assert VLLM.validate_default_args(["--trust-remote-code", "--download-dir=/cache"]) is None
    assert VLLM.validate_default_args(["--served-model=x"]) == (
        "--served-model (--served-model-name) is set by the control plane")
    assert VLLM.validate_default_args(["--no-such-flag"]) == "--no-such-flag is not a flag of vllm 0.32.0"
    assert VLLM.validate_default_args(["--grpc"]) == (
        "--grpc is refused (it serves gRPC instead of the OpenAI HTTP API the gateway and probes call)")


@pytest.mark.parametrize("vocab", [policy.VLLM, policy.SGLANG])
def test_every_flag_is_in_exactly_one_class(vocab):
    classes = [set(vocab.owner), set(vocab.tenant), set(vocab.platform), set(vocab.refused)]
    canonical = set(vocab.names.values())
    assert sum(map(len, classes)) == len(canonical)
    assert set().union(*classes) == canonical


def _rendered(adapter, **extra):
    settings = EngineSettings(
        max_model_len=8192, kv_cache_dtype="fp8_e5m2", enable_prefix_caching=False, enable_chunked_prefill=False,
        gpu_memory_utilization=0.85, max_num_seqs=64, tensor_parallel_size=2, pipeline_parallel_size=2,
        quantization="fp8", speculative_model="org/draft", num_speculative_tokens=3)
    return adapter.flags(settings, model_path="/models/m", served_name="m", **extra,
                         adapters=[LoraAdapter("a", "/adapters/a", rank=8)])


@pytest.mark.parametrize("extra", [{}, {"role": "prefill"},
                                   {"multi_node": MultiNode("2", "1", "leader", 29500, is_leader=False)}])
def test_every_flag_the_renderer_writes_is_one_kubesim_parses(extra):
    vargs = _rendered(VLLM, **extra)
    ns, _ = parse_vllm([*VLLM.command, *vargs])
    assert (ns.model, ns.tensor_parallel_size, ns.max_model_len, ns.kv_cache_dtype) == ("/models/m", 2, 8192,
                                                                                          "fp8_e5m2")
    sargs = _rendered(SGLANG, **({} if "multi_node" in extra else extra))
    ns, _ = parse_sglang([*SGLANG.command, *sargs])
    assert (ns.model_path, ns.tp_size, ns.context_length, ns.disable_radix_cache) == ("/models/m", 2, 8192, True)


@pytest.mark.parametrize("adapter,vocab", [(VLLM, policy.VLLM), (SGLANG, policy.SGLANG)])
def test_every_flag_the_renderer_writes_is_in_the_vocabulary_and_product_owned(adapter, vocab):
    flags = [a for a in _rendered(adapter) if a.startswith("--")]
    assert [f for f in flags if f not in vocab.names] == []
    assert [f for f in flags if vocab.names[f] not in vocab.owner] == []


def test_kubesim_parses_from_the_same_tables():
    from kubesim.engines import flags
    assert flags.VLLM_FLAGS is vllm.FLAGS and flags.SGLANG_FLAGS is sglang.FLAGS
    assert VLLM.kv_cache_dtypes is vllm.KV_CACHE_DTYPES
