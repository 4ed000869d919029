"""kubesim's `cpu-real` node class: nodes whose kubelet runs the real vLLM (CPU build), one definition of its
label, taint and engine memory for kubesim (kubesim/cluster/nodes.py, kubesim/engines/real.py) and the renderer
(apps/serving/cpureal.py), which places a vLLM service of a `local://` model there.
"""

from __future__ import annotations

NODE_CLASS_LABEL = "kubesim.io/node-class"
CPU_REAL = "cpu-real"
CPU_REAL_TAINT = "kubesim.io/cpu-real"
# What one real vLLM engine may hold (3.0 GB RSS measured with VLLM_CPU_KVCACHE_SPACE=1) and how many fit a node.
REAL_ENGINE_MEMORY_MIB = 3584
REAL_ENGINES_PER_NODE = 2
# A node's 1900m allocatable CPU shared by its engines; an engine idles at ~0 % and uses a core while it computes.
REAL_ENGINE_CPU = "500m"


def node_selector() -> dict[str, str]:
    return {NODE_CLASS_LABEL: CPU_REAL}


def toleration() -> dict[str, str]:
    return {"key": CPU_REAL_TAINT, "operator": "Exists", "effect": "NoSchedule"}
