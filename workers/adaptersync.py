"""The reconcile step that loads and unloads a service's run-time LoRA adapters on its ready engine pods.

The adapters `apps.serving.rendering.loras` says are loaded at run time are in no pod template, so adding or
removing one restarts nothing: each reconcile pass asks every ready engine pod what it holds (its /v1/models)
and loads what is missing, unloads what is no longer wanted (`workers.engineadapters.sync_adapters`). A pass that
changed a pod writes one audit entry (via "system"); a refused load, or a pod that could not be asked, is the
service's `AdaptersLoaded` condition, False, with the engine's own message.
"""

from __future__ import annotations

import logging

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


def sync_service_adapters(core, service, spec, pods: list[dict]) -> dict | None:
    """Sync the run-time adapters on the service's ready engine pods; the `AdaptersLoaded` condition, or None
    when the service has no run-time adapters."""
    desired = run_time_adapters(spec)
    if not desired:  # with none left, the template has no --enable-lora: its pods were replaced, holding none
        return None
    ready = [p for p in engine_pods(pods, {str(service.uid): service.pk}) if p.ready and p.port]
    problems, changes = [], []
    for pod in ready:
        try:
            result = sync_adapters(core, pod, spec.engine, desired, timeout=CALL_TIMEOUT_SECONDS)
        except AdapterCallFailed as exc:
            problems.append(str(exc))
            continue
        problems += [f"{pod.name}: {name}: {message}" for name, message in sorted(result.refused.items())]
        if result.loaded or result.unloaded:
            changes.append(result)
    if changes:
        record_change(
            actor=None, obj=service, action=AuditAction.UPDATE, via=AuditVia.SYSTEM, actor_label=ACTOR,
            before={"adapters_loaded": {r.pod: sorted(set(r.held) - set(r.loaded) | set(r.unloaded))
                                        for r in changes}},
            after={"adapters_loaded": {r.pod: r.held for r in changes}},
        )
    if problems:
        log.warning("service %s: adapters not loaded: %s", service.pk, "; ".join(problems))
        return st.condition(CONDITION, False, "LoadFailed", "; ".join(problems)[:2000], service.conditions)
    held = ", ".join(sorted(desired))
    return st.condition(CONDITION, True, "Loaded", f"{len(ready)} pods hold {held}.", service.conditions)
