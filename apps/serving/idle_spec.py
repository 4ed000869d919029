"""What a serverless service does when idle: delete its replicas (scale to zero), put them to sleep (vLLM's sleep
mode: the pod and its GPUs stay, the weights leave the GPU), or let the autoscaler choose from the service's own
wake history. Stored in the autoscaling policy (InferenceService.autoscaling):

    "when_idle": "delete" | "sleep" | "auto"   (default "delete")
    "sleep_level": 1 | 2                        (default 1: weights kept in host memory; 2: discarded, reloaded)
    "wake_objective_seconds": 10                (the activation time the service accepts; needed by "auto")

Every message starts with the key it is about, so the portal form puts it beside that input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models

from apps.catalog.choices import EngineKind
from apps.serving.choices import Autoscaler
from apps.serving.scaling_policy import MAX_WINDOW_S
from capacity.sleep import LEVELS
from enginevocab import sglang as sglang_vocab
from enginevocab import vllm as vllm_vocab


class WhenIdle(models.TextChoices):
    DELETE = "delete", "Delete the replicas (scale to zero)"
    SLEEP = "sleep", "Sleep (keep the GPUs, wake in seconds)"
    AUTO = "auto", "Choose from the wake history"


IDLE_KEYS = ("when_idle", "sleep_level", "wake_objective_seconds")


@dataclass(frozen=True)
class IdleSpec:
    when_idle: str = WhenIdle.DELETE
    sleep_level: int = 1
    wake_objective_s: float | None = None

    @property
    def may_sleep(self) -> bool:
        return self.when_idle != WhenIdle.DELETE


def idle_spec(autoscaling: Any) -> IdleSpec:
    """The idle settings of a (valid) stored policy, with their defaults."""
    spec = autoscaling if isinstance(autoscaling, dict) else {}
    objective = spec.get("wake_objective_seconds")
    return IdleSpec(spec.get("when_idle") or WhenIdle.DELETE, spec.get("sleep_level") or 1,
                    float(objective) if objective is not None else None)


def idle_errors(spec: dict, *, serverless: bool) -> list[str]:
    """Problems with the idle keys of an autoscaling policy (the engine is checked by `idle_engine_errors`)."""
    problems: list[str] = []
    when = spec.get("when_idle")
    if when is not None and when not in WhenIdle.values:
        problems.append(f"when_idle must be one of {', '.join(WhenIdle.values)}, not {when!r}.")
    level = spec.get("sleep_level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS):
        problems.append(f"sleep_level must be 1 (weights kept in host memory) or 2 (weights discarded), "
                        f"not {level!r}.")
    objective = spec.get("wake_objective_seconds")
    if objective is not None and (isinstance(objective, bool) or not isinstance(objective, int | float)
                                  or not 0 < objective <= MAX_WINDOW_S):
        problems.append(f"wake_objective_seconds must be a number of seconds above 0 and at most {MAX_WINDOW_S}.")
    present = [key for key in IDLE_KEYS if spec.get(key) is not None]
    if present and not serverless:
        problems.append(f"{present[0]} applies to serverless services only (they are the ones that go idle).")
    if when in (WhenIdle.SLEEP, WhenIdle.AUTO) and spec.get("autoscaler") != Autoscaler.BUILTIN:
        problems.append(f"when_idle {when} needs the builtin autoscaler: it is the one that puts replicas to sleep.")
    if when == WhenIdle.AUTO and objective is None:
        problems.append("wake_objective_seconds is needed when when_idle is auto: the rule picks the cheaper of "
                        "sleeping and deleting that wakes within it.")
    return problems


def idle_engine_errors(spec: Any, engine: str | None) -> list[str]:
    """vLLM sleeps at level 1 or 2 (sleep mode); SGLang at level 1 only: it releases its memory with a CPU backup
    of the weights and resumes from it (release/resume_memory_occupation). Its level 2 (no backup) would need the
    weights loaded again from disk after the resume, which the control plane does not do."""
    if not isinstance(spec, dict) or spec.get("when_idle") not in (WhenIdle.SLEEP, WhenIdle.AUTO):
        return []
    if engine == EngineKind.SGLANG and spec.get("sleep_level") == 2:
        return ["sleep_level 2 needs a vLLM runtime: SGLang sleeps at level 1 only (its weights kept in host "
                "memory and resumed from there)."]
    if engine is not None and engine not in (EngineKind.VLLM, EngineKind.SGLANG):
        return [f"when_idle {spec['when_idle']} needs a vLLM or SGLang runtime; this runtime is {engine}."]
    return []


def sleep_mode_args(when_idle: str, engine: str) -> tuple[list[str], dict[str, str]]:
    """The engine arguments and environment a service that may sleep renders: vLLM's --enable-sleep-mode and the
    switch that mounts /sleep, /wake_up and /is_sleeping; SGLang's memory saver with a CPU backup of the weights."""
    if when_idle not in (WhenIdle.SLEEP, WhenIdle.AUTO):
        return [], {}
    if engine == EngineKind.SGLANG:
        return [sglang_vocab.MEMORY_SAVER_FLAG, sglang_vocab.WEIGHTS_CPU_BACKUP_FLAG], {}
    if engine != EngineKind.VLLM:
        return [], {}
    return [vllm_vocab.SLEEP_MODE_FLAG], dict(vllm_vocab.SLEEP_ENDPOINTS_ENV)
