"""Reading a Hugging Face config.json: the architecture facts, and parameters for dense families whose
published totals the counts must reproduce (Llama 3.1 8B: 8.03 B, Qwen2.5 7B: 7.62 B, Qwen3 8B: 8.19 B)."""

from __future__ import annotations

import json

import pytest

from apps.catalog.hfconfig import ConfigError, model_facts

# The published config.json values of these models (architecture keys only).
LLAMA_31_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
               "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768,
             "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
QWEN3_8B = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
            "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_llama_facts_and_parameters():
    assert model_facts(json.dumps(LLAMA_31_8B)) == {
        "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8, "head_dim": 128,
        "max_context": 131072, "dtype": "bfloat16", "parameters_billions": 8.03, "kv_layout": "uniform"}


@pytest.mark.parametrize(("extra", "layout"), [
    ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "mla"),  # DeepSeek-V3's latent attention
    ({"layer_types": ["sliding_attention"] * 5 + ["full_attention"]}, "hybrid"),  # Gemma 3, gpt-oss
    ({"layer_types": ["full_attention"] * 6}, "uniform"),
    ({"attn_layer_period": 8, "attn_layer_offset": 4}, "hybrid"),  # Jamba: Mamba layers beside attention
    ({"sliding_window": 4096}, "uniform"),  # Mistral 7B v0.1: every layer the same window
])
def test_the_kv_layout_is_read_from_the_config(extra, layout):
    assert model_facts(json.dumps({**LLAMA_31_8B, **extra}))["kv_layout"] == layout


@pytest.mark.parametrize(("config", "billions"), [(QWEN25_7B, 7.62), (QWEN3_8B, 8.19)])
def test_parameters_of_other_dense_families(config, billions):
    assert model_facts(json.dumps(config))["parameters_billions"] == billions


def test_a_mixture_of_experts_leaves_parameters_to_the_user():
    facts = model_facts(json.dumps({**LLAMA_31_8B, "model_type": "mixtral", "num_local_experts": 8}))
    assert "parameters_billions" not in facts and facts["layers"] == 32


def test_without_kv_heads_a_model_has_one_per_attention_head():
    config = {k: v for k, v in LLAMA_31_8B.items() if k != "num_key_value_heads"}
    assert model_facts(json.dumps(config))["kv_heads"] == 32


def test_bad_json_and_missing_fields_are_named():
    with pytest.raises(ConfigError) as bad:
        model_facts('{"hidden_size": 4096,')
    assert "json" in bad.value.errors
    with pytest.raises(ConfigError) as missing:
        model_facts(json.dumps({"hidden_size": 4096, "num_attention_heads": "many", "torch_dtype": "int3"}))
    assert set(missing.value.errors) == {"num_hidden_layers", "num_attention_heads", "max_position_embeddings",
                                         "torch_dtype"}
    assert missing.value.errors["num_hidden_layers"] == "missing"
