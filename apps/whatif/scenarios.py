"""Scenarios: a service's configuration, or an alternative to it, as the fleet simulation runs it.

An alternative changes any of: the GPU type and GPUs per replica, the replica bounds, engine settings
(`max_num_seqs`, `max_num_batched_tokens`, `kv_cache_dtype`, `enable_prefix_caching`, `tensor_parallel_size`, …),
the routing policy (`lab_routing`) and the autoscaling policy (`none`; `builtin` with its targets and scale to
zero; `hpa` or `keda` as the renderer renders them, `apps.whatif.scalers`). It is judged by the service's own validation
(`InferenceService.clean()`, the rules the API and the portal apply), so the lab never simulates a
configuration the control plane would refuse. The engine a scenario runs is the one the renderer renders: its
pod template's container is parsed by kubesim's engine simulation, as a kubelet would start it, so the lab's
engine and the simulated cluster's are one definition.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.catalog.engines import EngineSettings
from apps.serving.capacity import draft_of
from apps.serving.choices import Autoscaler, DeploymentMode, RoutingPolicy
from apps.serving.names import COMPONENT_LABEL
from apps.serving.rendering import render_service
from apps.serving.rendering.spec import AutoscalingSpec, ServiceSpec, draft_model_spec, spec_from_service
from apps.serving.scaling_policy import pool_policy
from apps.whatif.fit import ANNOTATIONS
from apps.whatif.fleet import BUILTIN_TARGETS, DEFAULT_SLO, LEAST_LOADED, Slo
from apps.whatif.models import EngineFit
from apps.whatif.policies import Builtin, Fixed
from apps.whatif.recorded import mean_figure
from apps.whatif.scalers import kube_scaler
from capacity.roofline import Roofline
from kubesim.engines import engine_spec_for
from kubesim.engines.harness import pod_context
from kubesim.engines.routing import normalise_policy
from kubesim.engines.speculative import DRAFT_ARCH_ANNOTATION, acceptance_for_rate
from kubesim.workload import WorkloadExit

MAX_ALTERNATIVES = 8
ACCEPTANCE_WINDOW = timedelta(hours=1)  # the engines' speculative acceptance rate a scenario takes
POOL_FIELDS = ("gpu_type", "gpus_per_replica", "min_replicas", "max_replicas", "replicas")
FIELDS = frozenset({"name", "engine_settings", "autoscaling", "routing_policy", *POOL_FIELDS})
MODELLED_MODES = (DeploymentMode.STANDARD, DeploymentMode.SERVERLESS)


class ScenarioError(ValueError):
    """Alternatives that cannot be simulated: `problems` name the alternative and the field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass
class Scenario:
    name: str
    spec: Any  # kubesim's EngineSpec of one replica
    decide: Any  # the policy: decide(state, last_active) -> replicas
    start_replicas: int
    gpus: int  # per replica
    slo: Slo
    changes: dict
    routing: str = LEAST_LOADED  # the fleet's router: `lab_routing` of the routing policy


def lab_routing(policy: str) -> str:
    """How the lab routes a service's requests among its ready replicas: a service without a router (round robin)
    is balanced by the gateway by least outstanding requests (`gateway.balance`); a routing policy is its router's
    (kubesim's router policies, `kubesim.engines.routing`, as the simulated cluster's routers run them)."""
    return LEAST_LOADED if policy == RoutingPolicy.ROUND_ROBIN else normalise_policy(policy)


def _engine_pool(service):
    if service.deployment_mode not in MODELLED_MODES:
        raise ScenarioError([f"{service}: the lab models one engine pool (standard and serverless services); "
                             f"{service.get_deployment_mode_display()} services are not modelled yet"])
    return next(p for p in service.pools.all() if p.role == "engine")


def merged_settings(settings: dict | None, changes: dict) -> dict:
    """Engine settings with an alternative's over them; a setting changed to null goes back to the engine's
    default (it is dropped, as the engine settings store defaults)."""
    return {k: v for k, v in {**(settings or {}), **changes}.items() if v is not None}


def _validate(service, changes: dict, where: str) -> None:
    """Judge the changed service with the service's own clean(), on unsaved copies; raise naming the fields."""
    draft = copy.copy(service)
    pools = [copy.copy(p) for p in service.pools.all()]
    for pool in pools:
        if pool.role == "engine":
            for name in POOL_FIELDS:
                if name in changes:
                    setattr(pool, name, changes[name])
    if "engine_settings" in changes:
        draft.engine_settings = merged_settings(service.engine_settings, changes["engine_settings"])
    if "autoscaling" in changes:
        draft.autoscaling = changes["autoscaling"]
    if "routing_policy" in changes:
        draft.routing_policy = changes["routing_policy"]
    draft.stage_spec(pools=pools, adapters=list(service.adapters.all()))
    try:
        draft.clean()
    except ValidationError as exc:
        messages = [f"{where}.{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items()]
        raise ScenarioError(messages) from None
    if "autoscaling" in changes:
        changes["autoscaling"] = draft.autoscaling  # with the built-in autoscaler's defaults filled in


def _changed_spec(base: ServiceSpec, changes: dict, tenant_id: int) -> ServiceSpec:
    pools = tuple(dataclasses.replace(p, **{k: changes[k] for k in POOL_FIELDS if k in changes})
                  if p.role == "engine" else p for p in base.pools)
    settings = base.settings
    if "engine_settings" in changes:
        settings = EngineSettings.from_dict(merged_settings(base.settings.to_dict(), changes["engine_settings"]))
    autoscaling = AutoscalingSpec.from_dict(changes["autoscaling"]) if "autoscaling" in changes else base.autoscaling
    draft = draft_model_spec(tenant_id, settings.speculative_model)  # the draft model an alternative names
    return dataclasses.replace(base, pools=pools, settings=settings, autoscaling=autoscaling, draft_model=draft)


def lab_physics(service) -> dict:
    """The step-time coefficients of the service's latest applied fit (`manage.py calibrate --apply`), as the
    `kubesim.io/<name>` pod annotations kubesim's engines read them ({} when none: the model's defaults)."""
    latest = EngineFit.objects.filter(service_id=service.pk, applied=True).order_by("-created").first()
    if latest is None:
        return {}
    return {ANNOTATIONS[k]: str(v) for k, v in latest.coefficients.items() if k in ANNOTATIONS}


def draft_arch(tenant_id: int, settings: EngineSettings) -> dict:
    """The draft model's architecture as its catalog row gives it (`kubesim.io/draft-model-arch`), so a draft the
    engine simulation does not know by name is simulated as itself, not as its fallback model ({} without one)."""
    arch = draft_of(tenant_id, settings)
    return {} if arch is None else {DRAFT_ARCH_ANNOTATION: json.dumps(dataclasses.asdict(arch))}


def measured_acceptance(service, settings: EngineSettings) -> dict:
    """`kubesim.io/spec-acceptance` from the service's own engines over the last hour, for settings that draft as
    the service does (same method and draft model, any number of drafts): the chance a drafted token is accepted
    that gives the acceptance rate they reported. {} otherwise: the engine simulation's assumption stands."""
    current = EngineSettings.from_dict(service.engine_settings or {})
    drafter = (settings.speculative_method, settings.speculative_model)
    if not settings.num_speculative_tokens or not current.num_speculative_tokens or drafter != (
            current.speculative_method, current.speculative_model):
        return {}
    now = timezone.now()
    rate = mean_figure(service, "spec_accept_rate", now - ACCEPTANCE_WINDOW, now)
    return {} if rate is None else {
        "kubesim.io/spec-acceptance": str(acceptance_for_rate(rate, current.num_speculative_tokens))}


def engine_core(service):
    """kubesim's CoreConfig of one replica of the service's engine as configured (the budgets and KV pool the
    engine resolves from its flags and GPU: what the advice rules start from)."""
    _engine_pool(service)
    engine, _ = _replica_engine(spec_from_service(service), "current", {})
    return engine.core


def base_roofline(service) -> tuple[Roofline, int]:
    """The roofline of the service's engine as configured (model, GPU, TP, weights and KV bytes a rank), and its
    batched-token budget: what a fit of the coefficients starts from."""
    core = engine_core(service)
    return (Roofline(core.model, core.gpu, core.tp, core.weight_bytes_rank, core.kv_bytes_per_token_rank),
            core.max_num_batched_tokens)


def _replica_engine(spec: ServiceSpec, where: str, physics: dict):
    """kubesim's EngineSpec of one engine replica, from the container the renderer renders."""
    pool = next(p for p in spec.pools if p.role == "engine")
    for obj in render_service(spec):
        template = (obj.get("spec") or {}).get("template") or {}
        if obj.get("kind") == "Deployment" and (template.get("metadata") or {}).get("labels", {}).get(
                COMPONENT_LABEL) == "engine":
            container = template["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
            ctx = pod_context(container["image"], container.get("args"), command=container.get("command"),
                              gpu_key=pool.gpu_type, gpu_count=pool.gpus_per_replica, env=env,
                              annotations={**((template.get("metadata") or {}).get("annotations") or {}), **physics},
                              fast_start=False)
            try:
                engine = engine_spec_for(ctx)
            except WorkloadExit as exc:
                raise ScenarioError([f"{where}: the engine would not start: {exc}"]) from None
            if engine.data_parallel > 1:
                raise ScenarioError([f"{where}: {engine.data_parallel} data-parallel engines per replica are not "
                                     "modelled yet; use tensor_parallel_size equal to the GPUs per replica"])
            return engine, pool
    raise ScenarioError([f"{where}: no engine Deployment was rendered"])


def _policy(autoscaling: dict, pool, where: str):
    kind = (autoscaling or {}).get("autoscaler", Autoscaler.NONE)
    if kind == Autoscaler.BUILTIN:
        return Builtin(pool_policy(autoscaling, "engine", pool.min_replicas, pool.max_replicas)), pool.min_replicas
    if kind in (Autoscaler.HPA, Autoscaler.KEDA):
        return kube_scaler(autoscaling, pool)
    return Fixed(pool.replicas), pool.replicas


def service_slo(autoscaling: dict) -> Slo:
    """The service's own TTFT and ITL targets where its built-in policy sets them, else 2 s and 0.1 s."""
    targets = ((autoscaling or {}).get("pools") or {}).get("engine", {}).get("targets") \
        or (autoscaling or {}).get("targets") or {}
    return Slo(float(targets.get("ttft_p95_seconds") or DEFAULT_SLO.ttft_s),
               float(targets.get("itl_p95_seconds") or DEFAULT_SLO.itl_s))


def scenario(service, changes: dict, where: str, slo: Slo | None = None) -> Scenario:
    """The scenario of `service` with `changes` (an alternative, or {} for its current configuration)."""
    _engine_pool(service)
    changes = dict(changes)
    name = changes.pop("name", None) or "current"
    if changes:
        _validate(service, changes, where)
    spec = _changed_spec(spec_from_service(service), changes, service.tenant_id)
    engine, pool = _replica_engine(spec, where, {**lab_physics(service), **draft_arch(service.tenant_id, spec.settings),
                                                 **measured_acceptance(service, spec.settings)})
    autoscaling = changes.get("autoscaling", service.autoscaling)
    decide, start = _policy(autoscaling, pool, where)
    return Scenario(name, engine, decide, start, pool.gpus_per_replica * pool.nodes_per_replica,
                    slo or service_slo(service.autoscaling), changes,
                    lab_routing(changes.get("routing_policy", service.routing_policy)))


def parse_alternatives(data: Any) -> list[dict]:
    """A list of at most MAX_ALTERNATIVES objects with known fields and distinct names (may be empty)."""
    if not isinstance(data, list):
        raise ScenarioError(["alternatives must be a JSON list of objects (empty for the current configuration only)"])
    if len(data) > MAX_ALTERNATIVES:
        raise ScenarioError([f"at most {MAX_ALTERNATIVES} alternatives, not {len(data)}"])
    problems, names = [], {"current"}
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            problems.append(f"alternatives[{i}] must be an object")
            continue
        for unknown in sorted(set(item) - FIELDS):
            problems.append(f"alternatives[{i}].{unknown}: unknown field (known: {', '.join(sorted(FIELDS))})")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 60:
            problems.append(f"alternatives[{i}].name: a name of 1 to 60 characters is required")
        elif name in names:
            problems.append(f"alternatives[{i}].name: {name!r} is used twice (or is the current configuration's)")
        else:
            names.add(name)
        for key in ("engine_settings", "autoscaling"):
            if key in item and not isinstance(item[key], dict):
                problems.append(f"alternatives[{i}].{key} must be an object")
        for key in POOL_FIELDS:
            value = item.get(key)
            if key == "gpu_type":
                if key in item and not isinstance(value, str):
                    problems.append(f"alternatives[{i}].gpu_type must be a GPU type's name")
            elif key in item and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000):
                problems.append(f"alternatives[{i}].{key} must be a whole number from 0 to 10000")
    if problems:
        raise ScenarioError(problems)
    return data


def default_alternatives(service) -> list[dict]:
    """Three questions an operator asks of any service: fp8 KV, half the batch, and no autoscaler at its
    maximum (or, for a fixed fleet, the built-in autoscaler from one replica to that size)."""
    pool = _engine_pool(service)
    settings = service.engine_settings or {}
    out = []
    if settings.get("kv_cache_dtype") not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        out.append({"name": "fp8 KV cache", "engine_settings": {"kv_cache_dtype": "fp8"}})
    seqs = settings.get("max_num_seqs") or 256
    out.append({"name": f"max_num_seqs {max(1, seqs // 2)}", "engine_settings": {"max_num_seqs": max(1, seqs // 2)}})
    if service.autoscaled_by_builtin:
        out.append({"name": f"fixed {pool.max_replicas} replicas", "replicas": pool.max_replicas,
                    "min_replicas": pool.max_replicas, "autoscaling": {"autoscaler": "none"}})
    else:
        out.append({"name": f"built-in autoscaler 1-{max(pool.replicas, 2)}", "min_replicas": 1,
                    "max_replicas": max(pool.replicas, 2),
                    "autoscaling": {"autoscaler": "builtin", "targets": dict(BUILTIN_TARGETS)}})
    return out
