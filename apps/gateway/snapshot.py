"""The gateway's routing snapshot, built here by the control plane so the gateway's request path needs
neither Django's ORM nor a database round trip. It is plain JSON: keys appear only as SHA-256 hashes,
and only keys that are usable now (not revoked, not expired)."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from apps.catalog.choices import DeploymentMode
from apps.gateway.api.serializers import LIMIT_FIELDS
from apps.gateway.models import InferenceKey, TenantLimits, Upstream
from apps.serving.choices import PoolRole
from apps.serving.models import InferenceService, ServiceObservation
from apps.telemetry.choices import Resolution
from apps.telemetry.lora import FAMILY as LORA_FAMILY
from apps.telemetry.lora import stored_lora_slots
from apps.telemetry.models import PodStat, SeriesPoint
from capacity.arch import vllm_default_max_num_seqs
from capacity.gpus import GPUS

SNAPSHOT_FORMAT = 1
SIGNALS_MAX_AGE = timedelta(seconds=60)


def _limits(obj) -> dict:
    return {name: getattr(obj, name) for name in LIMIT_FIELDS}


def max_outstanding(service, ready_engines: int) -> int | None:
    """The service's saturation bound for the gateway's queue (gateway/door.py): requests its ready engines run
    at once (`max_num_seqs`, else vLLM's default for the pool's GPU); None with no engine ready (nothing to
    queue for: a service to wake is held by activation, any other is answered 503)."""
    if not ready_engines:
        return None
    seqs = service.engine_settings_obj().max_num_seqs
    if seqs is None:
        # The engines' own default: decode pools are the ones that run sequences, so their GPU decides.
        pools = sorted(service.pools.all(), key=lambda pool: pool.role != PoolRole.DECODE)
        seqs = vllm_default_max_num_seqs(GPUS[pools[0].gpu_type]) if pools else None
    return ready_engines * seqs if seqs else None


def sleeping(upstream: Upstream | None, engine: str = "vllm") -> dict | None:
    """The engines the gateway wakes before it forwards (gateway/wake.py): those of a service put to sleep with
    no prompt served since (a request that came meanwhile woke them, and woke them for good)."""
    if upstream is None or not upstream.sleep_level or upstream.slept_at is None:
        return None
    if SeriesPoint.objects.filter(service_id=upstream.service_id, resolution=Resolution.RAW,
                                  time__gt=upstream.slept_at, prompt_tps__gt=0).exists():
        return None
    return {"level": upstream.sleep_level, "since": upstream.slept_at.isoformat(), "engine": engine,
            "engines": [e["address"] for e in upstream.engines]}


def engine_signals(now) -> dict[int, dict]:
    """Each service's latest engine figures of the last SIGNALS_MAX_AGE (the telemetry cycle's raw points): the
    requests its engines hold waiting and their KV-cache usage, which the gateway's door reads as "no spare
    capacity" for the lowest band (gateway/door.py). A service without a recent point has none."""
    points = (SeriesPoint.objects.filter(role="", resolution=Resolution.RAW, time__gte=now - SIGNALS_MAX_AGE)
              .order_by("service_id", "-time").distinct("service_id").values_list("service_id", "waiting", "kv_usage"))
    return {sid: {"engine_waiting": waiting, "kv_usage": kv} for sid, waiting, kv in points}


def lora_slots(now) -> dict[tuple[int, str], dict]:
    """(service id, pod) → the pod's LoRA slots from its latest scrape of the last SIGNALS_MAX_AGE (the adapters
    of its running and waiting requests and its max_lora, apps/telemetry/lora.py); pods without the metric have
    none."""
    rows = (PodStat.objects.filter(scraped_at__gte=now - SIGNALS_MAX_AGE)
            .values_list("service_id", "pod", f"snapshot__gauges__{LORA_FAMILY}"))
    slots = {(sid, pod): stored_lora_slots(series) for sid, pod, series in rows if series}
    return {key: value for key, value in slots.items() if value is not None}


def _with_adapters(service_id: int, endpoints: list[dict], held: dict | None, slots: dict) -> list[dict]:
    """Each endpoint with the run-time LoRA adapters its pod holds, as the reconciler last read its /v1/models
    (`ServiceObservation.adapters`), and its engine's LoRA slots (`lora`, from telemetry): the gateway's LoRA
    affinity (gateway/balance.py) prefers the pods running the adapter, then those holding it with a free slot."""
    out = []
    for e in endpoints:
        if (held or {}).get(e["pod"], {}).get("held"):
            e = {**e, "adapters": held[e["pod"]]["held"]}
        if (service_id, e.get("pod")) in slots:
            e = {**e, "lora": slots[service_id, e["pod"]]}
        out.append(e)
    return out


def build_snapshot() -> dict:
    now = timezone.now()
    upstreams = {u.service_id: u for u in Upstream.objects.all()}
    signals = engine_signals(now)
    services = (InferenceService.objects.select_related("tenant", "model", "runtime")
                .prefetch_related("adapters", "pools"))
    # What the builtin autoscaler wakes from zero (workers/activation.py): the gateway holds their requests.
    wakes = set(services.filter(deployment_mode=DeploymentMode.SERVERLESS, autoscaling__autoscaler="builtin",
                                deletion_requested_at__isnull=True).values_list("pk", flat=True))
    held = dict(ServiceObservation.objects.exclude(adapters={}).values_list("service_id", "adapters"))
    slots = lora_slots(now)
    keys = (InferenceKey.objects.filter(revoked_at__isnull=True, expires_at__gt=now)
            .prefetch_related("services"))
    return {
        "format": SNAPSHOT_FORMAT,
        "built_at": now.isoformat(),
        "tenants": {str(t.tenant_id): {**_limits(t), "weight": t.fair_share_weight}
                    for t in TenantLimits.objects.all()},
        "services": [{
            "id": s.pk, "tenant_id": s.tenant_id, "name": s.name, "served_model": s.model.name,
            "adapters": sorted(a.name for a in s.adapters.all()), "routing_policy": s.routing_policy,
            "routed": s.pk in upstreams and upstreams[s.pk].routed,
            "endpoints": _with_adapters(s.pk, upstreams[s.pk].endpoints, held.get(s.pk), slots)
            if s.pk in upstreams else [],
            "ready_engines": upstreams[s.pk].ready_engines if s.pk in upstreams else 0, "wakes": s.pk in wakes,
            "max_outstanding": max_outstanding(s, upstreams[s.pk].ready_engines if s.pk in upstreams else 0),
            "sleeping": sleeping(upstreams.get(s.pk), s.runtime.engine),
            **signals.get(s.pk, {"engine_waiting": None, "kv_usage": None}),
        } for s in services],
        "keys": {k.key_hash: {
            "id": k.pk, "tenant_id": k.tenant_id, "expires_at": k.expires_at.timestamp(),
            "services": sorted(s.pk for s in k.services.all()) or None, "priority": k.priority, **_limits(k),
        } for k in keys},
    }


def write_snapshot(path: Path) -> dict:
    """Write atomically (a rename), so a gateway never reads half a snapshot."""
    snapshot = build_snapshot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".snapshot-")
    with os.fdopen(fd, "w") as handle:
        json.dump(snapshot, handle, separators=(",", ":"))
    os.replace(tmp, path)
    return snapshot
