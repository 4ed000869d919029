"""The reconcile step that loads and unloads a service's run-time LoRA adapters on its ready engine pods.

The adapters `apps.serving.rendering.loras` says are loaded at run time are in no pod template, so adding or
removing one restarts nothing: each reconcile pass asks every ready engine pod what it holds (its /v1/models)
and loads what is missing, unloads what is no longer wanted (`workers.engineadapters.sync_adapters`). A pass that
changed a pod writes one audit entry (via "system"); a refused load is the service's `AdaptersLoaded` condition,
False, reason LoadRefused, with the engine's own message (PodUnreachable when a pod could not be asked).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.serving.rendering.loras import run_time_adapters
from workers import status as st
from workers.engineadapters import AdapterCallFailed, sync_adapters
from workers.enginepods import engine_pods

log = logging.getLogger(__name__)

CONDITION = "AdaptersLoaded"
ACTOR = "reconciler"
CALL_TIMEOUT_SECONDS = 30.0
NOT_ASKED = "the engine could not be asked"


@dataclass
class AdapterPass:
    """One pass over a service's pods: its AdaptersLoaded condition (None without run-time adapters) and, per
    ready pod, the adapters its /v1/models lists or why it could not be asked ({pod: {"held": [...]} or
    {"error": message}}), for the service page."""

    condition: dict | None = None
    held: dict = field(default_factory=dict)


def sync_service_adapters(core, service, spec, pods: list[dict]) -> AdapterPass:
    """Sync the run-time adapters on the service's ready engine pods."""
    desired = run_time_adapters(spec)
    # During a canary rollout the canary unit's pods (they carry its revision) serve the new revision's set.
    canary = run_time_adapters(spec.canary.unit) if spec.canary is not None else {}
    if not desired and not canary:  # none left: the template has no --enable-lora, its pods were replaced
        return AdapterPass()
    ready = [p for p in engine_pods(pods, {str(service.uid): service.pk}) if p.ready and p.port]
    refused, unreachable, changes, held = [], [], [], {}
    for pod in ready:
        try:
            wanted = canary if pod.revision and spec.canary is not None else desired
            result = sync_adapters(core, pod, spec.engine, wanted, timeout=CALL_TIMEOUT_SECONDS)
        except AdapterCallFailed as exc:  # the proxy's or client's words: platform staff read them (disclosure)
            unreachable.append(str(exc))
            held[pod.name] = {"error": NOT_ASKED}
            continue
        held[pod.name] = {"held": result.held, **({"refused": result.refused} if result.refused else {})}
        refused += [f"{pod.name}: {name}: {message}" for name, message in sorted(result.refused.items())]
        if result.loaded or result.unloaded:
            changes.append(result)
    if changes:
        record_change(
            actor=None, obj=service, action=AuditAction.UPDATE, via=AuditVia.SYSTEM, actor_label=ACTOR,
            before={"adapters_loaded": {r.pod: sorted(set(r.held) - set(r.loaded) | set(r.unloaded))
                                        for r in changes}},
            after={"adapters_loaded": {r.pod: r.held for r in changes}},
        )
    if refused or unreachable:
        log.warning("service %s: adapters not loaded: %s", service.pk, "; ".join(refused + unreachable))
        # The engine's own messages are about the tenant's adapters (LoadRefused is shown to the tenant); a pod
        # the API server could not reach is the platform's (PodUnreachable is summarised for tenants).
        reason = "LoadRefused" if refused else "PodUnreachable"
        words = refused + ([f"{len(unreachable)} pods could not be asked"] if refused and unreachable else [])
        return AdapterPass(st.condition(CONDITION, False, reason, "; ".join(words or unreachable)[:2000],
                                        service.conditions), held)
    names = ", ".join(sorted(set(desired) | set(canary)))
    return AdapterPass(st.condition(CONDITION, True, "Loaded", f"{len(ready)} pods hold {names}.", service.conditions),
                       held)
