"""Results people act on: the cost of each scenario from the operators' GPU price table, and *Apply*, which turns
an alternative into an ordinary change of the service (`apps.serving.actions.save_service`: the same validation,
audit, revision and reconcile as an edit in the portal or the API)."""

from __future__ import annotations

import dataclasses

from django.core.exceptions import ValidationError

from apps.serving.actions import save_service
from apps.serving.models import POOL_SPEC_FIELDS, InferenceService
from apps.serving.rendering.spec import PoolSpec
from apps.whatif.models import GpuPrice, Run, RunStatus
from apps.whatif.scenarios import POOL_FIELDS, merged_settings


def gpu_prices() -> dict[str, float]:
    """USD per GPU-hour by GPU type, as the operators set them (types without a row have no price)."""
    return {gpu: float(price) for gpu, price in GpuPrice.objects.values_list("gpu_type", "usd_per_gpu_hour")}


def with_costs(scenarios: list[dict], prices: dict[str, float]) -> list[dict]:
    """Each scenario with its GPU price, its cost over the load and its cost per million tokens served (None
    where its GPU type has no price or it served no token)."""
    out = []
    for s in scenarios:
        price = prices.get(s.get("gpu_type"))
        cost = None if price is None else s["gpu_hours"] * price
        tokens = s.get("tokens") or 0
        out.append({**s, "usd_per_gpu_hour": price, "cost_usd": None if cost is None else round(cost, 4),
                    "cost_per_mtok_usd": round(cost / tokens * 1e6, 4) if cost is not None and tokens else None})
    return out


def scenario_of(run: Run, name: str) -> dict:
    if run.status not in (RunStatus.SUCCEEDED, RunStatus.STOPPED) or not run.result:
        raise ValidationError({"scenario": "The run has no results to apply."})
    if name == "current":
        raise ValidationError({"scenario": "The current configuration is what the service runs already."})
    found = next((s for s in run.result["scenarios"] if s["name"] == name), None)
    if found is None:
        raise ValidationError({"scenario": f"The run has no scenario named {name!r}."})
    return found


def apply_scenario(run: Run, name: str, *, actor, via) -> InferenceService:
    """Change the run's service as scenario `name` did: engine pool fields, engine settings, routing policy and
    autoscaling over the service as it is now; the service's own validation decides (ValidationError naming the
    field)."""
    changes = scenario_of(run, name)["changes"]
    service = InferenceService.objects.with_related().get(pk=run.service_id)
    pools = []
    for pool in service.pools.all():
        spec = PoolSpec(role=pool.role, **{f: getattr(pool, f) for f in POOL_SPEC_FIELDS})
        if pool.role == "engine":
            spec = dataclasses.replace(spec, **{k: changes[k] for k in POOL_FIELDS if k in changes})
        pools.append(spec)
    if "engine_settings" in changes:
        service.engine_settings = merged_settings(service.engine_settings, changes["engine_settings"])
    if "autoscaling" in changes:
        service.autoscaling = changes["autoscaling"]
    if "routing_policy" in changes:
        service.routing_policy = changes["routing_policy"]
    return save_service(service, pools=pools, adapters=list(service.adapters.all()), actor=actor, via=via)
