"""Which LoRA adapters a service's engines load at run time, and with what path.

An adapter is loaded at run time (`workers.adaptersync`, through vLLM's /v1/load_lora_adapter) when the engine
is vLLM and its source is a Hugging Face repository without a pinned revision: vLLM downloads a repository id
given as `lora_path` itself, so the pod template needs neither a fetch container nor a `--lora-modules` entry
for it, and adding or removing one changes no pod template (no restart). Every other adapter (SGLang's, an
`s3://` or `pvc://` source, an `hf://…@revision` one, whose files reach the pod only through its template) stays
in the template: fetched by an init container and named in `--lora-modules` / `--lora-paths`. A vLLM adapter whose
source is `local://path` is loaded at run time too, by its path in the pod (apps/serving/rendering/localsource.py).
"""

from __future__ import annotations

from apps.serving.rendering.localsource import is_local, local_path
from apps.serving.rendering.spec import AdapterSpec, ServiceSpec

HF_PREFIX = "hf://"


def loaded_at_run_time(spec: ServiceSpec, adapter: AdapterSpec) -> bool:
    uri = adapter.source_uri
    return spec.engine == "vllm" and (is_local(uri) or (uri.startswith(HF_PREFIX) and "@" not in uri))


def run_time_path(adapter: AdapterSpec) -> str:
    """The `lora_path` the engine is given: the repository id (`org/name`), or a local source's path in the pod."""
    if is_local(adapter.source_uri):
        return local_path(adapter.source_uri)
    return adapter.source_uri.removeprefix(HF_PREFIX)


def run_time_adapters(spec: ServiceSpec) -> dict[str, str]:
    """Adapter name -> `lora_path`, for every adapter the service's engines load at run time."""
    return {a.name: run_time_path(a) for a in spec.adapters if loaded_at_run_time(spec, a)}
