"""A running engine's LoRA adapters, through the API server's pod proxy: which it holds (its `/v1/models`, where
an adapter is a card with a parent) and loading or unloading one (vLLM's /v1/load_lora_adapter and
/v1/unload_lora_adapter, allowed by VLLM_ALLOW_RUNTIME_LORA_UPDATING; SGLang's /load_lora_adapter and
/unload_lora_adapter), so a pod's adapter set changes without a restart.

`sync_adapters` is level-based (STYLE 12): it observes the pod, loads what is desired and missing, unloads what
is held and not desired, and observes again; run twice, the second run changes nothing. A refused load keeps
the engine's own message, for the service's condition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kubernetes import client as k8s

from workers.enginepods import EnginePod, proxy_call

# engine kind -> (load path, unload path), relative to the pod proxy.
LORA_PATHS = {"vllm": ("v1/load_lora_adapter", "v1/unload_lora_adapter"),
              "sglang": ("load_lora_adapter", "unload_lora_adapter")}
MAX_ANSWER_BYTES = 1 << 20


class AdapterCallFailed(Exception):
    """The engine could not be asked (unreachable, not ready, an answer that is not its JSON)."""


@dataclass
class AdapterSync:
    """One pod's sync: what it loaded and unloaded, what it refused (adapter -> the engine's message), and the
    adapters it holds afterwards."""

    pod: str
    loaded: list[str] = field(default_factory=list)
    unloaded: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    held: list[str] = field(default_factory=list)


def engine_message(text: str) -> str:
    """The message in an engine's error answer: vLLM's {"error": {"message"}}, SGLang's {"message"} or
    {"error_message"}; the text itself when it is none of these."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("message", "error_message", "detail"):
            if body.get(key):
                return str(body[key])
    return text.strip()[:500]


def _call(core: k8s.CoreV1Api, pod: EnginePod, method: str, path: str, timeout: float, body=None) -> tuple[int, str]:
    try:
        response = proxy_call(core, pod, method, path, timeout, body, accept="application/json")
        text = response.read()[:MAX_ANSWER_BYTES].decode("utf-8", errors="replace")
    except Exception as exc:  # the pod or the API server unreachable: the whole pod's sync fails
        raise AdapterCallFailed(f"{pod.name}: {type(exc).__name__}: {exc}") from None
    return response.status, text


def held_adapters(core: k8s.CoreV1Api, pod: EnginePod, timeout: float) -> list[str]:
    """The adapters the engine serves now, sorted: the cards of its /v1/models that name a parent model."""
    status, text = _call(core, pod, "GET", "v1/models", timeout)
    if status != 200:
        raise AdapterCallFailed(f"{pod.name}: /v1/models answered {status}: {engine_message(text)}")
    try:
        cards = json.loads(text)["data"]
    except (ValueError, KeyError, TypeError):
        raise AdapterCallFailed(f"{pod.name}: /v1/models is not a model list") from None
    return sorted(card["id"] for card in cards if isinstance(card, dict) and card.get("parent"))


def sync_adapters(core: k8s.CoreV1Api, pod: EnginePod, kind: str, desired: dict[str, str],
                  timeout: float = 30.0) -> AdapterSync:
    """Make the pod's engine hold exactly `desired` (adapter name -> its path in the pod)."""
    load_path, unload_path = LORA_PATHS[kind]
    result = AdapterSync(pod.name)
    held = held_adapters(core, pod, timeout)
    for name in sorted(set(desired) - set(held)):
        status, text = _call(core, pod, "POST", load_path, timeout, {"lora_name": name, "lora_path": desired[name]})
        if status == 200:
            result.loaded.append(name)
        else:
            result.refused[name] = engine_message(text)
    for name in sorted(set(held) - set(desired)):
        status, text = _call(core, pod, "POST", unload_path, timeout, {"lora_name": name})
        if status == 200:
            result.unloaded.append(name)
        else:
            result.refused[name] = engine_message(text)
    result.held = held_adapters(core, pod, timeout) if result.loaded or result.unloaded else held
    return result
