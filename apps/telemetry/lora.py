"""vLLM's LoRA slots from its exposition: `vllm:lora_requests_info`, a gauge whose labels name the adapters of the
running and the waiting requests (comma-separated) and `--max-loras`, and whose value is when the scheduler last
reported them (a series per label set; the latest is the one with the highest value). The gateway's LoRA affinity
reads it (apps/gateway/snapshot.py, gateway/balance.py). Pure functions, no Django models and no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

FAMILY = "lora_requests_info"


def _names(text: str) -> list[str]:
    return sorted({name for name in text.split(",") if name})


def lora_slots(series: Iterable[tuple[Mapping[str, str], float]]) -> dict | None:
    """{"running": [...], "waiting": [...], "max_lora": N} from the family's (labels, value) series, or None
    when the engine exports none (no --enable-lora, SGLang) or the latest names no valid `max_lora`."""
    latest = max(series, key=lambda item: item[1], default=None)
    if latest is None:
        return None
    labels = latest[0]
    try:
        max_lora = int(labels.get("max_lora", ""))
    except ValueError:
        return None
    return {"running": _names(labels.get("running_lora_adapters", "")),
            "waiting": _names(labels.get("waiting_lora_adapters", "")), "max_lora": max_lora}


def stored_lora_slots(series: list | None) -> dict | None:
    """`lora_slots` of the family as telemetry stores it per pod (`Snapshot.to_dict`'s gauges, `PodStat.snapshot`:
    a list of [labels, value])."""
    return lora_slots((labels, float(value)) for labels, value in series or ())
