"""Placement on kubesim's `cpu-real` nodes: a vLLM service of a `local://` model runs the real vLLM (CPU build).

Such a model is a directory of the node's local models folder (apps/serving/rendering/localsource.py), and the
nodes that hold that folder and run vLLM without a GPU are the `cpu-real` class (capacity/cpureal.py, the
definition kubesim's nodes carry): the engine pod selects their class label, tolerates their taint, and asks for
one real engine's CPU and memory instead of GPUs (apps/serving/rendering/pods.py). What the CPU build cannot
honour is refused before that, at admission (apps/serving/validation.py).
"""

from __future__ import annotations

from apps.catalog.validators import is_local
from capacity.cpureal import REAL_ENGINE_CPU, REAL_ENGINE_MEMORY_MIB, node_selector, toleration


def on_cpu_real(engine: str, model_source: str) -> bool:
    """Whether a service of this engine and model source is placed on cpu-real nodes."""
    return engine == "vllm" and is_local(model_source)


def placement() -> dict:
    """The engine pod spec's node selector and toleration for cpu-real nodes."""
    return {"nodeSelector": node_selector(), "tolerations": [toleration()]}


def resources() -> dict:
    """One real engine's CPU and memory (the memory is also its limit, which the node's admission bounds)."""
    memory = f"{REAL_ENGINE_MEMORY_MIB}Mi"
    return {"requests": {"cpu": REAL_ENGINE_CPU, "memory": memory}, "limits": {"memory": memory}}
