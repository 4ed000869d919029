"""Reading a Hugging Face `config.json` into the catalog's architecture facts.

Pure: no Django. `model_facts(text)` returns the Model fields a config determines, or raises
`ConfigError` naming what is wrong (bad JSON, a missing or non-numeric key). Parameters are derived
only for dense decoder architectures whose weight shapes are known (Llama, Mistral, Qwen2, Qwen3);
for others (mixture-of-experts among them) they are left for the user to fill in.
"""

from __future__ import annotations

import json

DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "fp8": "fp8",
          "float8_e4m3fn": "fp8"}
# model_type → (q/k/v projections carry a bias, per-head q/k norms)
DENSE = {"llama": (False, False), "mistral": (False, False), "qwen2": (True, False), "qwen3": (False, True)}


class ConfigError(ValueError):
    """The text is not a usable config.json; `errors` maps a config key (or "json") to the reason."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def _positive_int(config: dict, key: str, errors: dict) -> int | None:
    value = config.get(key)
    if value is None:
        errors[key] = "missing"
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors[key] = f"must be a positive integer, got {value!r}"
        return None
    return value


def model_facts(text: str) -> dict:
    """Model field → value from a config.json text: layers, hidden_size, attention_heads, kv_heads,
    head_dim, max_context, dtype, and parameters_billions when derivable."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError({"json": f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"}) from exc
    if not isinstance(config, dict):
        raise ConfigError({"json": "a config.json is a JSON object"})
    # Multimodal configs keep the language model's facts under text_config.
    if isinstance(config.get("text_config"), dict) and "num_hidden_layers" not in config:
        config = {**config, **config["text_config"]}
    errors: dict[str, str] = {}
    layers = _positive_int(config, "num_hidden_layers", errors)
    hidden = _positive_int(config, "hidden_size", errors)
    heads = _positive_int(config, "num_attention_heads", errors)
    max_context = _positive_int(config, "max_position_embeddings", errors)
    # Without num_key_value_heads a model uses multi-head attention: one KV head per attention head.
    kv_heads = _positive_int(config, "num_key_value_heads", errors) if "num_key_value_heads" in config else heads
    head_dim = None
    if "head_dim" in config and config["head_dim"] is not None:
        head_dim = _positive_int(config, "head_dim", errors)
    elif hidden and heads:
        if hidden % heads:
            errors["head_dim"] = f"missing, and hidden_size {hidden} is not a multiple of {heads} heads"
        else:
            head_dim = hidden // heads
    dtype_name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    dtype = DTYPES.get(str(dtype_name))
    if dtype is None:
        errors["torch_dtype"] = f"{dtype_name!r} is not one of {', '.join(sorted(DTYPES))}"
    if errors:
        raise ConfigError(errors)
    facts = {"layers": layers, "hidden_size": hidden, "attention_heads": heads, "kv_heads": kv_heads,
             "head_dim": head_dim, "max_context": max_context, "dtype": dtype, "kv_layout": kv_layout(config)}
    parameters = dense_parameters(config, facts)
    if parameters is not None:
        facts["parameters_billions"] = round(parameters / 1e9, 2)
    return facts


def kv_layout(config: dict) -> str:
    """The KV layout (apps.catalog.choices.KvLayout) a config describes: `mla` with a `kv_lora_rank`; `hybrid`
    with layers of more than one kind (`layer_types`, Gemma's `sliding_window_pattern`, Mamba layers)."""
    if config.get("kv_lora_rank"):
        return "mla"
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and len(set(map(str, kinds))) > 1:
        return "hybrid"
    if any(config.get(key) for key in ("sliding_window_pattern", "attn_layer_period", "attn_layer_indices",
                                       "layers_block_type", "mamba_d_state")):
        return "hybrid"
    return "uniform"


def dense_parameters(config: dict, facts: dict) -> int | None:
    """Weights of a dense decoder of a known family, counted from its shapes; None when not derivable."""
    family = DENSE.get(str(config.get("model_type", "")))
    vocab, inter = config.get("vocab_size"), config.get("intermediate_size")
    moe = any(k in config for k in ("num_experts", "num_local_experts", "n_routed_experts"))
    if family is None or moe or not isinstance(vocab, int) or not isinstance(inter, int):
        return None
    qkv_bias, qk_norm = family
    h, heads, kv, hd = facts["hidden_size"], facts["attention_heads"], facts["kv_heads"], facts["head_dim"]
    attention = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if qkv_bias:
        attention += heads * hd + 2 * kv * hd
    if qk_norm:
        attention += 2 * hd
    mlp = 3 * h * inter  # gate, up and down projections
    per_layer = attention + mlp + 2 * h  # two RMSNorm weights
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return facts["layers"] * per_layer + embeddings + h  # + the final norm
