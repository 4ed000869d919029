"""Tiny Llama checkpoints and LoRA adapters made here, for the real vLLM on `cpu-real` nodes (nothing downloaded).

    python -m kubesim tiny-model --out DIR [--layers 2 --hidden 128 --vocab 4096 --seed 0]
    python -m kubesim tiny-adapter --model DIR --out DIR [--rank 8 --seed 1]

A model is config.json (LlamaForCausalLM), model.safetensors with seeded random weights, and a byte-level BPE
tokenizer trained with `tokenizers` on kubesim's own documentation; the same arguments write the same bytes.
An adapter is PEFT's layout (adapter_config.json, adapter_model.safetensors) on the model's attention
projections. torch, safetensors and tokenizers (the `engines` extra) are imported only by these commands.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# The tokenizer's corpus: text kubesim ships, sorted so that training sees it in one order.
CORPUS = sorted(Path(__file__).parent.glob("*.md"))
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
# A plain chat template (role: content lines), so /v1/chat/completions works as it does for instruct models.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
ADAPTER_TARGETS = ("q_proj", "v_proj")


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def train_tokenizer(vocab: int):
    """A byte-level BPE of at most `vocab` tokens (three of them special) trained on CORPUS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[BOS, EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator((p.read_text() for p in CORPUS), trainer=trainer)
    return tokenizer


def llama_config(layers: int, hidden: int, vocab: int, tokenizer) -> dict:
    """config.json of a Llama with 32-wide heads, half as many KV heads (grouped-query attention)."""
    heads = max(1, hidden // 32)
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2), "head_dim": hidden // heads,
        "vocab_size": vocab, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
        "bos_token_id": tokenizer.token_to_id(BOS), "eos_token_id": tokenizer.token_to_id(EOS),
        "pad_token_id": tokenizer.token_to_id(PAD),
    }


def llama_weights(config: dict, seed: int) -> dict:
    """Seeded normal(0, 0.02) weights under the names transformers' and vLLM's Llama loaders read."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * config["head_dim"]

    def normal(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    weights = {"model.embed_tokens.weight": normal(vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights |= {
            p + "self_attn.q_proj.weight": normal(hidden, hidden), p + "self_attn.k_proj.weight": normal(kv, hidden),
            p + "self_attn.v_proj.weight": normal(kv, hidden), p + "self_attn.o_proj.weight": normal(hidden, hidden),
            p + "mlp.gate_proj.weight": normal(inter, hidden), p + "mlp.up_proj.weight": normal(inter, hidden),
            p + "mlp.down_proj.weight": normal(hidden, inter),
            p + "input_layernorm.weight": torch.ones(hidden), p + "post_attention_layernorm.weight": torch.ones(hidden),
        }
    weights["model.norm.weight"] = torch.ones(hidden)
    weights["lm_head.weight"] = normal(vocab, hidden)
    return weights


def tiny_model(out: Path, layers: int = 2, hidden: int = 128, vocab: int = 4096, seed: int = 0) -> dict:
    """Write a checkpoint into `out`; returns its config."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(vocab)
    tokenizer.save(str(out / "tokenizer.json"))
    config = llama_config(layers, hidden, vocab, tokenizer)
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", {k: config[k] for k in ("bos_token_id", "eos_token_id")})
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "model_max_length": config["max_position_embeddings"], "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    })
    save_file(llama_weights(config, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    return config


def tiny_adapter(model: Path, out: Path, rank: int = 8, seed: int = 1) -> dict:
    """Write a PEFT LoRA adapter for the checkpoint in `model` into `out`; returns its adapter_config."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((model / "config.json").read_text())
    hidden, kv = config["hidden_size"], config["num_key_value_heads"] * config["head_dim"]
    widths = {"q_proj": hidden, "v_proj": kv}
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for i in range(config["num_hidden_layers"]):
        for target in ADAPTER_TARGETS:
            p = f"base_model.model.model.layers.{i}.self_attn.{target}."
            # B is not zero (as a trained adapter's is not), so the adapter changes what the model writes.
            weights[p + "lora_A.weight"] = torch.randn(rank, hidden, generator=gen) * 0.02
            weights[p + "lora_B.weight"] = torch.randn(widths[target], rank, generator=gen) * 0.02
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter_config = {
        "base_model_name_or_path": str(model), "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
        "lora_alpha": 2 * rank, "lora_dropout": 0.0, "target_modules": list(ADAPTER_TARGETS), "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "modules_to_save": None,
    }
    _write_json(out / "adapter_config.json", adapter_config)
    return adapter_config


def add_commands(commands) -> None:
    """The `tiny-model` and `tiny-adapter` subcommands of `python -m kubesim`."""
    model = commands.add_parser("tiny-model", help="write a tiny Llama checkpoint (nothing downloaded)")
    model.add_argument("--out", type=Path, required=True)
    model.add_argument("--layers", type=int, default=2)
    model.add_argument("--hidden", type=int, default=128, help="a multiple of 32 (the head width)")
    model.add_argument("--vocab", type=int, default=4096)
    model.add_argument("--seed", type=int, default=0)
    adapter = commands.add_parser("tiny-adapter", help="write a PEFT LoRA adapter for a tiny model")
    adapter.add_argument("--model", type=Path, required=True)
    adapter.add_argument("--out", type=Path, required=True)
    adapter.add_argument("--rank", type=int, default=8)
    adapter.add_argument("--seed", type=int, default=1)


def run(args: argparse.Namespace, error) -> int:
    """Run a parsed `tiny-model` or `tiny-adapter` command; `error` is the parser's usage error."""
    if args.command == "tiny-model":
        if args.layers < 1 or args.hidden < 32 or args.hidden % 32 or args.vocab < 512:
            error("--layers must be at least 1, --hidden a multiple of 32 and --vocab at least 512")
        config = tiny_model(args.out, args.layers, args.hidden, args.vocab, args.seed)
        print(f"wrote {args.out}: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
              f"vocab {config['vocab_size']}")
        return 0
    if not (args.model / "config.json").is_file():
        error(f"--model {args.model}: no config.json there (make one with tiny-model)")
    if args.rank < 1:
        error("--rank must be at least 1")
    tiny_adapter(args.model, args.out, args.rank, args.seed)
    print(f"wrote {args.out}: LoRA rank {args.rank} on {', '.join(ADAPTER_TARGETS)}")
    return 0
