"""Which GPU and model a simulated engine runs: the GPU of its node and the model its flags name.

The facts and the arithmetic live in the shared `capacity` package (imported by the control plane too);
this module only resolves a pod's model path to an architecture the way the engines read config.json.
"""

from __future__ import annotations

import json

from capacity.arch import ModelArch
from capacity.known import KNOWN_MODELS

DEFAULT_GPU = "h100-sxm-80gb"
# Unknown models get this shape (an 8B Llama) unless the pod passes an architecture.
FALLBACK_ARCH = KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
ARCH_ANNOTATION = "kubesim.io/model-arch"


def resolve_model(model: str, override: str | None = None, aliases: list[str] | None = None) -> ModelArch:
    """The architecture for a model path: an explicit JSON override, the known table, else the fallback.

    Paths such as `/models/Llama-3.1-8B-Instruct` or `hf://meta-llama/...` match the table by their tail;
    `aliases` (served model names) are tried next.
    """
    if override:
        try:
            fields = json.loads(override)
            fields.setdefault("name", model)
            return ModelArch(**fields)
        except (ValueError, TypeError) as e:
            raise ValueError(f"invalid {ARCH_ANNOTATION} annotation: {e}") from None
    for candidate in [model, *(aliases or [])]:
        if candidate in KNOWN_MODELS:
            return KNOWN_MODELS[candidate]
        tail = candidate.rstrip("/").split("/")[-1].lower()
        for name, arch in KNOWN_MODELS.items():
            if name.split("/")[-1].lower() == tail:
                return arch
    return ModelArch(**{**FALLBACK_ARCH.__dict__, "name": model})
