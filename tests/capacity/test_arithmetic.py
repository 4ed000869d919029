"""The planner follows vLLM's arithmetic: every expected figure below is worked out by hand in the comments.

Common constants: 1 GiB = 1,073,741,824 B; L4 = 24 GiB = 25,769,803,776 B; H100 SXM = 80 GiB = 85,899,345,920 B.
gpu_memory_utilization 0.9: L4 23,192,823,398.4 B, H100 77,309,411,328 B usable.
Activations = max_num_batched_tokens x hidden x 32 B (vLLM's default batch: 2048 tokens on the L4,
8192 on the H100); non-torch overhead 536,870,912 B (0.5 GiB). Block = 16 tokens.
"""

from __future__ import annotations

import pytest

from capacity.arch import ModelArch
from capacity.gpus import GPUS
from capacity.known import KNOWN_MODELS
from capacity.plan import Knobs, plan, what_fits

L4, H100 = GPUS["l4-24gb"], GPUS["h100-sxm-80gb"]
LLAMA_8B = KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
LLAMA_70B = KNOWN_MODELS["meta-llama/Llama-3.1-70B-Instruct"]
QWEN_7B = KNOWN_MODELS["Qwen/Qwen2.5-7B-Instruct"]


def test_llama_8b_on_one_l4_holds_3017_blocks_and_cannot_take_its_full_context():
    # weights 8.03e9 x 2 = 16,060,000,000; KV/token 2 x 32 layers x 8 heads x 128 x 2 B = 131,072; block 2,097,152.
    # activations 2048 x 4096 x 32 = 268,435,456.
    # budget 23,192,823,398.4 - 16,060,000,000 - 268,435,456 - 536,870,912 = 6,327,517,030
    # blocks 6,327,517,030 // 2,097,152 = 3017 (3017 x 2,097,152 = 6,327,107,584); tokens 48,272.
    p = plan(LLAMA_8B, L4).as_dict()
    assert p["weights_bytes"] == 16_060_000_000
    assert p["kv_bytes_per_token"] == 131_072 and p["block_bytes"] == 2_097_152
    assert p["kv_budget_bytes"] == 6_327_517_030
    assert p["num_blocks"] == 3017 and p["max_tokens"] == 48_272
    # 48,272 / 131,072 = 0.368 → 0.37; the 131,072-token context does not fit: vLLM refuses to start.
    assert p["max_concurrent_at_context"] == 0.37
    assert p["fits"] is False and "131072" in p["reason"] and "48272" in p["reason"]
    # TP 2: weights 8,030,000,000, KV/token 65,536 (4 heads per rank), block 1,048,576;
    # budget 23,192,823,398.4 - 8,030,000,000 - 268,435,456 - 536,870,912 = 14,357,517,030
    # → 13,692 blocks = 219,072 tokens ≥ 131,072: TP 2 is the smallest that fits.
    assert p["min_tp"] == 2
    tp2 = plan(LLAMA_8B, L4, 2).as_dict()
    assert (tp2["num_blocks"], tp2["max_tokens"], tp2["fits"]) == (13_692, 219_072, True)


def test_llama_8b_on_one_l4_with_fp8_kv_doubles_the_blocks():
    # KV/token 65,536, block 1,048,576; same budget 6,327,517,030 → 6034 blocks (6034 x 1,048,576 = 6,327,107,584).
    p = plan(LLAMA_8B, L4, knobs=Knobs(kv_cache_dtype="fp8", max_model_len=16384)).as_dict()
    assert (p["num_blocks"], p["max_tokens"]) == (6034, 96_544)
    # 96,544 / 16,384 = 5.89 sequences at context: fits with headroom.
    assert p["fits"] is True and p["max_concurrent_at_context"] == 5.89 and p["reason"] == ""


def test_llama_8b_on_one_h100():
    # activations 8192 x 4096 x 32 = 1,073,741,824.
    # budget 77,309,411,328 - 16,060,000,000 - 1,073,741,824 - 536,870,912 = 59,638,798,592
    # blocks 59,638,798,592 // 2,097,152 = 28,437 (28,437 x 2,097,152 = 59,636,711,424); tokens 454,992.
    p = plan(LLAMA_8B, H100)
    assert (p.kv_budget_bytes, p.num_blocks, p.max_tokens) == (59_638_798_592, 28_437, 454_992)
    # 454,992 / 131,072 = 3.47 < 4: it fits, with low headroom.
    assert p.fits and p.max_concurrent_at_context == 3.47 and p.low_headroom and p.min_tp == 1


def test_qwen_7b_on_one_l4_and_one_h100():
    # weights 7.62e9 x 2 = 15,240,000,000; KV/token 2 x 28 x 4 x 128 x 2 = 57,344; block 917,504.
    # L4: activations 2048 x 3584 x 32 = 234,881,024;
    # budget 23,192,823,398.4 - 15,240,000,000 - 234,881,024 - 536,870,912 = 7,181,071,462
    # blocks 7,181,071,462 // 917,504 = 7826 (7826 x 917,504 = 7,180,386,304); tokens 125,216; 125,216 / 32,768 = 3.82.
    l4 = plan(QWEN_7B, L4)
    assert (l4.weights_bytes, l4.kv_bytes_per_token, l4.block_bytes) == (15_240_000_000, 57_344, 917_504)
    assert (l4.kv_budget_bytes, l4.num_blocks, l4.max_tokens) == (7_181_071_462, 7826, 125_216)
    assert l4.fits and l4.max_concurrent_at_context == 3.82 and l4.low_headroom
    # H100: activations 8192 x 3584 x 32 = 939,524,096;
    # budget 77,309,411,328 - 15,240,000,000 - 939,524,096 - 536,870,912 = 60,593,016,320
    # blocks 60,593,016,320 // 917,504 = 66,041 (66,041 x 917,504 = 60,592,881,664); tokens 1,056,656; / 32,768 = 32.25.
    h100 = plan(QWEN_7B, H100)
    assert (h100.kv_budget_bytes, h100.num_blocks, h100.max_tokens) == (60_593_016_320, 66_041, 1_056_656)
    assert h100.fits and h100.max_concurrent_at_context == 32.25 and not h100.low_headroom


def test_llama_70b_weights_do_not_fit_one_l4_or_one_h100():
    # 70.6e9 x 2 = 141,200,000,000 B = 131.5 GiB per GPU at TP 1, against 24 and 80 GiB.
    for gpu in (L4, H100):
        p = plan(LLAMA_70B, gpu)
        assert p.weights_bytes == 141_200_000_000 and not p.fits and p.problem == "weights"
        assert "131.5 GiB" in p.reason and f"{gpu.memory_gb} GiB" in p.reason
        assert p.engine_error.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    # L4 TP 8: weights 17,650,000,000, KV/token 2 x 80 x 1 x 128 x 2 = 40,960, block 655,360,
    # activations 2048 x 8192 x 32 = 536,870,912;
    # budget 23,192,823,398.4 - 17,650,000,000 - 536,870,912 - 536,870,912 = 4,469,081,574
    # → 6819 blocks (6819 x 655,360 = 4,468,899,840) = 109,104 tokens < 131,072: no single L4 node fits.
    tp8 = plan(LLAMA_70B, L4, 8)
    assert (tp8.num_blocks, tp8.max_tokens, tp8.problem) == (6819, 109_104, "max_model_len")
    assert plan(LLAMA_70B, L4).min_tp is None


def test_llama_70b_on_h100_needs_tp_4_at_full_context():
    # TP 2: weights 70,600,000,000; KV/token 2 x 80 x 4 x 128 x 2 = 163,840; block 2,621,440;
    # activations 8192 x 8192 x 32 = 2,147,483,648;
    # budget 77,309,411,328 - 70,600,000,000 - 2,147,483,648 - 536,870,912 = 4,025,056,768
    # → 1535 blocks (1535 x 2,621,440 = 4,023,910,400) = 24,560 tokens < 131,072.
    tp2 = plan(LLAMA_70B, H100, 2)
    assert (tp2.num_blocks, tp2.max_tokens, tp2.fits) == (1535, 24_560, False)
    # TP 4: weights 35,300,000,000; KV/token 81,920; block 1,310,720;
    # budget 77,309,411,328 - 35,300,000,000 - 2,147,483,648 - 536,870,912 = 39,325,056,768
    # → 30,002 blocks (30,002 x 1,310,720 = 39,324,221,440) = 480,032 tokens; / 131,072 = 3.66.
    tp4 = plan(LLAMA_70B, H100, 4)
    assert (tp4.num_blocks, tp4.max_tokens, tp4.fits, tp4.max_concurrent_at_context) == (30_002, 480_032, True, 3.66)
    assert tp2.min_tp == 4


def test_advice_names_the_smallest_option_on_the_same_gpu_and_on_another():
    # At 8192 tokens the 70B starts on 8 L4s (109,104 tokens above); the fewest-GPU NVIDIA alternative is one
    # B200: 180 GiB x 0.9 = 173,946,175,488 - 141,200,000,000 - 16384 x 8192 x 32 (4,294,967,296) - 536,870,912
    # = 27,914,337,280 B of KV → 85,187 tokens at 327,680 B/token ≥ 8192 (the H200's 141 GiB cannot hold 131.5 GiB
    # of weights plus activations at 0.9).
    assert what_fits(LLAMA_70B, L4, Knobs(max_model_len=8192)) == "needs ≥ 8 × L4 (TP 8) or 1 × B200 (TP 1)"


def test_tp_must_divide_the_attention_heads():
    # Qwen2.5-7B has 28 attention heads: TP 3 does not divide them.
    p = plan(QWEN_7B, H100, 3)
    assert not p.fits and p.problem == "tp" and "28" in p.reason


def test_mla_caches_the_latent_per_layer_and_does_not_split_it_across_ranks():
    # DeepSeek-V3: 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values per layer, 2 bytes:
    # 61 x 576 x 2 = 70,272 B per token on every rank (TP 1 or 8).
    deepseek = ModelArch("deepseek-ai/DeepSeek-V3", 671, 61, 7168, 128, 128, 128, 163840, 37,
                         kv_lora_rank=512, qk_rope_head_dim=64)
    assert deepseek.kv_bytes_per_token(2, 1) == 70_272 == deepseek.kv_bytes_per_token(2, 8)
    assert deepseek.kv_bytes_per_token(1, 8) == 35_136  # fp8 KV cache


@pytest.mark.parametrize("key", list(GPUS))
def test_gpu_table_keys_match_the_reference(key):
    # reference/gpus-and-models.md lists exactly these keys, with memory in the key's suffix.
    assert GPUS[key].memory_gb == int(key.rsplit("-", 1)[1].removesuffix("gb"))


def test_llama_8b_bf16_on_an_rtx_4090_at_095_keeps_3631_blocks_as_vllms_profile_counts_them():
    # By hand: 24 GiB x 0.95 = 24,481,313,587 B; minus 8.03e9 x 2 B of weights (16.06 GB = 14.96 GiB), minus
    # 2,048 batched tokens x 4,096 hidden x 32 B = 0.25 GiB of activations, minus 0.5 GiB of non-torch memory
    # = 7,616,007,219 B. A block is 16 x 2 x 32 layers x 8 KV heads x 128 x 2 B = 2 MiB: 3,631 blocks.
    # (The worked example's ~2,800 counts 24 GB without the 0.95, GB as GiB, and an 8,192-token profile.)
    p = plan(LLAMA_8B, GPUS["rtx4090-24gb"], 1, Knobs(gpu_memory_utilization=0.95, max_model_len=8192))
    assert p.block_bytes == 2 * 1024**2
    assert p.kv_budget_bytes == 7_616_007_219
    assert p.num_blocks == 3631 and p.max_tokens == 3631 * 16
