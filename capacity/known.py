"""Architectures of the models in reference/gpus-and-models.md, and of two small models used as speculative
decoding's draft models, as their published configs (`config.json`) give them.

The simulator reads a model's "config.json" from here; the control plane has its own catalog rows.
"""

from __future__ import annotations

from capacity.arch import ModelArch

KNOWN_MODELS: dict[str, ModelArch] = {
    m.name: m
    for m in [
        ModelArch("meta-llama/Llama-3.1-8B-Instruct", 8.03, 32, 4096, 32, 8, 128, 131072),
        ModelArch("meta-llama/Llama-3.1-70B-Instruct", 70.6, 80, 8192, 64, 8, 128, 131072),
        ModelArch("Qwen/Qwen2.5-7B-Instruct", 7.62, 28, 3584, 28, 4, 128, 32768),
        ModelArch("Qwen/Qwen2.5-32B-Instruct", 32.8, 64, 5120, 40, 8, 128, 32768),
        ModelArch("Qwen/Qwen2.5-72B-Instruct", 72.7, 80, 8192, 64, 8, 128, 32768),
        ModelArch("Qwen/Qwen3-8B", 8.19, 36, 4096, 32, 8, 128, 32768),
        ModelArch("mistralai/Mistral-7B-Instruct-v0.3", 7.25, 32, 4096, 32, 8, 128, 32768),
        ModelArch("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7, 32, 4096, 32, 8, 128, 32768, 12.9),
        # Draft models: the Llama 3.1 and Qwen 2.5 families' smallest, which share their tokenizers.
        ModelArch("meta-llama/Llama-3.2-1B-Instruct", 1.24, 16, 2048, 32, 8, 64, 131072),
        ModelArch("Qwen/Qwen2.5-0.5B-Instruct", 0.49, 24, 896, 14, 2, 64, 32768),
    ]
}
