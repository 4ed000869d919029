"""`python -m kubesim tiny-model` and `tiny-adapter`: deterministic checkpoints that transformers and PEFT's
layout accept, written by the CLI itself, with nothing of torch imported by kubesim until those commands run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# One worker runs the whole module under `--dist loadgroup`: its module fixture writes tiny models with torch in
# subprocesses, once per worker that takes one of its tests.
pytestmark = pytest.mark.xdist_group("tiny-model")

ROOT = Path(__file__).resolve().parents[2]


def _kubesim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubesim", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Two models of the same arguments, one of another seed, and an adapter of the first."""
    root = tmp_path_factory.mktemp("tiny")
    for name, seed in (("a", "0"), ("b", "0"), ("c", "5")):
        done = _kubesim("tiny-model", "--out", str(root / name), "--layers", "2", "--hidden", "64",
                        "--vocab", "1024", "--seed", seed)
        assert done.returncode == 0, done.stderr
    done = _kubesim("tiny-adapter", "--model", str(root / "a"), "--out", str(root / "a-lora"), "--rank", "4")
    assert done.returncode == 0, done.stderr
    return root


def test_the_same_arguments_write_the_same_bytes_and_another_seed_other_weights(made):
    names = sorted(p.name for p in (made / "a").iterdir())
    assert names == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"]
    for name in names:
        assert (made / "a" / name).read_bytes() == (made / "b" / name).read_bytes(), name
    assert (made / "a" / "model.safetensors").read_bytes() != (made / "c" / "model.safetensors").read_bytes()
    assert (made / "a" / "tokenizer.json").read_bytes() == (made / "c" / "tokenizer.json").read_bytes()


def test_transformers_loads_the_model_and_its_tokenizer_and_the_adapter_fits_its_layers(made):
    from enginevocab.vllm_launch import hide_unloadable

    hide_unloadable()  # transformers would import the torchvision that cannot load (docs/real-engines.md)
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(made / "a")
    assert len(tokenizer) == 1024
    text = "kubesim speaks the Kubernetes API"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text)  # merges learnt, not bytes alone
    model = LlamaForCausalLM.from_pretrained(made / "a")
    logits = model(torch.tensor([ids])).logits
    assert tuple(logits.shape) == (1, len(ids), 1024)
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat == "<s>user: hi\nassistant: "

    config = json.loads((made / "a-lora" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["base_model_name_or_path"]) == ("LORA", 4, str(made / "a"))
    params = dict(model.named_parameters())
    for name, tensor in load_file(made / "a-lora" / "adapter_model.safetensors").items():
        # base_model.model.<layer>.q_proj.lora_A.weight: A is rank x in, B is out x rank of that layer.
        layer = params[name.removeprefix("base_model.model.").replace(".lora_A", "").replace(".lora_B", "")]
        expected = (4, layer.shape[1]) if ".lora_A." in name else (layer.shape[0], 4)
        assert tuple(tensor.shape) == expected, name


def test_kubesim_imports_no_torch_until_a_tiny_command_runs():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, kubesim.__main__, kubesim.tinymodel; "
         "print(sorted(m for m in ('torch', 'safetensors', 'tokenizers') if m in sys.modules))"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_bad_arguments_are_refused_with_the_reason(tmp_path):
    done = _kubesim("tiny-model", "--out", str(tmp_path / "m"), "--hidden", "100")
    assert done.returncode == 2
    assert "--hidden a multiple of 32" in done.stderr
    assert not (tmp_path / "m").exists()
    done = _kubesim("tiny-adapter", "--model", str(tmp_path), "--out", str(tmp_path / "a"))
    assert done.returncode == 2
    assert "no config.json there" in done.stderr
