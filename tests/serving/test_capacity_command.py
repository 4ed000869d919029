"""`manage.py capacity`: JSON keys, the readable table, the advisor, and exit status 2 on unknown input."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.factories import ModelFactory, TenantFactory

pytestmark = pytest.mark.django_db

KEYS = {"model", "gpu", "tp", "kv_bytes_per_token", "block_bytes", "weights_bytes", "kv_budget_bytes", "num_blocks",
        "max_tokens", "max_concurrent_at_context", "fits", "min_tp", "reason", "cpu_tier_tokens",
        "cpu_tier_block_load_us"}


def run(*args) -> str:
    out = StringIO()
    call_command("capacity", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def llama():
    return ModelFactory(name="llama-3-1-8b-instruct")


def test_json_is_one_object_with_exactly_the_documented_keys(llama):
    data = json.loads(run("--model", "llama-3-1-8b-instruct", "--gpu", "l4-24gb", "--json"))
    assert set(data) == KEYS
    # Worked by hand in tests/capacity/test_arithmetic.py: 3017 blocks, 48,272 tokens, smallest TP 2.
    assert (data["num_blocks"], data["max_tokens"], data["fits"], data["min_tp"]) == (3017, 48_272, False, 2)
    assert data["model"] == "llama-3-1-8b-instruct" and data["gpu"] == "l4-24gb" and data["tp"] == 1


def test_model_by_source_id_and_options(llama):
    data = json.loads(run("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4-24gb", "--tp", "2",
                          "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.9", "--max-model-len", "16384",
                          "--json"))
    # TP 2, fp8: KV/token 2 x 32 x 4 x 128 x 1 = 32,768; block 524,288; budget 14,357,517,030 → 27,384 blocks.
    assert (data["kv_bytes_per_token"], data["block_bytes"], data["num_blocks"]) == (32_768, 524_288, 27_384)
    assert data["fits"] is True and data["reason"] == ""


def test_the_cpu_tier_in_tokens(llama):
    # Llama-3.1-8B, bf16, TP 1: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes per token, a block of
    # 16 is 2 MiB; 16 GiB holds 8,192 blocks = 131,072 tokens. At TP 2 each GPU holds half of each token's KV
    # (65,536 bytes), so the same 16 GiB per GPU holds twice the tokens.
    data = json.loads(run("--model", "llama-3-1-8b-instruct", "--gpu", "h100-sxm-80gb", "--cpu-tier-gib", "16",
                          "--json"))
    assert data["cpu_tier_tokens"] == 131_072
    # A 2 MiB block over the H100's PCIe 5.0 x16 host link (63.0e9 bytes/s nominal): 2,097,152 / 63e9 = 33.3 µs.
    assert data["cpu_tier_block_load_us"] == 33.3
    data = json.loads(run("--model", "llama-3-1-8b-instruct", "--gpu", "h100-sxm-80gb", "--tp", "2",
                          "--cpu-tier-gib", "16", "--json"))
    assert data["cpu_tier_tokens"] == 262_144
    assert json.loads(run("--model", "llama-3-1-8b-instruct", "--gpu", "h100-sxm-80gb", "--json"))[
        "cpu_tier_tokens"] == 0
    text = run("--model", "llama-3-1-8b-instruct", "--gpu", "h100-sxm-80gb", "--cpu-tier-gib", "16")
    assert "CPU tier tokens (16 GiB per GPU)" in text and "131,072" in text and "33.3 µs" in text


def test_readable_table(llama):
    text = run("--model", "llama-3-1-8b-instruct", "--gpu", "h100-sxm-80gb")
    assert "llama-3-1-8b-instruct on 1 × NVIDIA H100 SXM 80GB (TP 1)" in text
    assert "blocks (num_gpu_blocks)" in text and "28,437" in text and "fits" in text


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model", "--gpu", "l4-24gb"], "unknown model 'no-such-model'"),
    (["--model", "llama-3-1-8b-instruct", "--gpu", "t4-16gb"], "unknown GPU type 't4-16gb'"),
    (["--model", "llama-3-1-8b-instruct", "--gpu", "l4-24gb", "--kv-cache-dtype", "int3"], "--kv-cache-dtype"),
    (["--model", "llama-3-1-8b-instruct", "--gpu", "l4-24gb", "--max-model-len", "999999"], "context of 131072"),
    (["--model", "llama-3-1-8b-instruct", "--rate", "5"], "sizing needs all of"),
    (["--model", "llama-3-1-8b-instruct"], "give --gpu"),
])
def test_bad_input_is_a_clear_message_and_exit_status_2(llama, args, message):
    with pytest.raises(CommandError) as info:
        run(*args)
    assert message in str(info.value)
    assert info.value.returncode == 2


def test_an_ambiguous_name_is_refused(llama):
    ModelFactory(name="llama-3-1-8b-instruct", tenant=TenantFactory())
    ModelFactory(name="llama-3-1-8b-instruct", tenant=TenantFactory())
    # Platform-wide entries win over tenant-private ones of the same name.
    assert json.loads(run("--model", "llama-3-1-8b-instruct", "--gpu", "l4-24gb", "--json"))["num_blocks"] == 3017
    # Two platform-wide entries of one source id: the source id no longer names one model.
    ModelFactory(name="llama-8b-copy")
    with pytest.raises(CommandError) as info:
        run("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "l4-24gb")
    assert "ambiguous" in str(info.value) and info.value.returncode == 2


def test_advisor_ranks_options_by_gpus_each_within_the_slo(llama):
    data = json.loads(run("--model", "llama-3-1-8b-instruct", "--rate", "10", "--prompt-tokens", "512",
                          "--output-tokens", "128", "--ttft-slo", "0.5", "--json"))
    options = data["suggestions"]
    assert options and all(o["ttft_p95_s"] <= 0.5 for o in options)
    assert [o["gpus"] for o in options] == sorted(o["gpus"] for o in options)
    assert all(o["gpus"] == o["tp"] * o["replicas"] for o in options)
    # GPU-hours per million tokens: GPUs / (10 req/s x 640 tokens x 3600 s / 1e6) = GPUs / 23.04.
    assert options[0]["gpu_hours_per_million_tokens"] == round(options[0]["gpus"] / 23.04, 4)
    # 512 + 128 tokens fit a 1024-token context.
    assert options[0]["max_model_len"] == 1024
    text = run("--model", "llama-3-1-8b-instruct", "--rate", "10", "--prompt-tokens", "512", "--output-tokens", "128",
               "--ttft-slo", "0.5")
    assert "GPU-h/Mtok" in text and options[0]["gpu"] in text


def test_advisor_refuses_a_non_positive_rate(llama):
    with pytest.raises(CommandError) as info:
        run("--model", "llama-3-1-8b-instruct", "--rate", "0", "--prompt-tokens", "512", "--output-tokens", "128",
            "--ttft-slo", "0.5")
    assert "--rate" in str(info.value) and info.value.returncode == 2


def test_advisor_considers_only_the_offered_gpus(llama):
    data = json.loads(run("--model", "llama-3-1-8b-instruct", "--rate", "8", "--prompt-tokens", "512",
                          "--output-tokens", "128", "--ttft-slo", "0.5", "--gpus", "l4-24gb", "--json"))
    assert data["suggestions"] and {o["gpu"] for o in data["suggestions"]} == {"l4-24gb"}
    with pytest.raises(CommandError) as info:
        run("--model", "llama-3-1-8b-instruct", "--rate", "8", "--prompt-tokens", "512", "--output-tokens", "128",
            "--ttft-slo", "0.5", "--gpus", "t4-16gb")
    assert "--gpus: unknown GPU type(s) t4-16gb" in str(info.value) and info.value.returncode == 2
