"""The rules of a whole service (spec, pools, adapters, quota), run by `InferenceService.clean()`.

Admin, API and portal all end up here, so every door rejects the same things with the same field
names: `name`, `model`, `runtime`, `adapters`, `deployment_mode`, `routing_policy`,
`engine_settings`, `autoscaling`, `pools`, `priority_class`.
"""

from __future__ import annotations

from collections import defaultdict

from django.core.exceptions import ValidationError

from apps.catalog import kvoffload
from apps.catalog.choices import DeploymentMode
from apps.catalog.engines import EngineSettings, EngineSettingsError, get_adapter
from apps.catalog.validators import is_local
from apps.clusters.models import Cluster, unavailable_cluster_message
from apps.serving.autoscaling_spec import autoscaling_errors
from apps.serving.choices import ENGINE_ONLY_ROUTING, MODE_POOL_ROLES, ROUTER_POLICIES, RoutingPolicy
from apps.serving.cpureal import on_cpu_real
from apps.serving.idle_spec import idle_engine_errors
from apps.serving.quota import covered_services, entry_words, held, queue_for
from apps.serving.rollout_spec import is_canary, rollout_errors
from capacity.gpus import gpu_for, node_allocatable_memory_gib
from capacity.parallel import ParallelismError, effective_parallelism
from enginevocab.cpubuild import refusal

# LoRA adapters one service may serve; engines keep each loaded one in GPU memory (vLLM `--max-loras`).
MAX_ADAPTERS = 64


def service_errors(service, pools: list, adapters: list) -> dict[str, list[str]]:
    """Field name → messages for everything wrong with this service; empty when it is valid."""
    errors: dict[str, list[str]] = defaultdict(list)
    tenant_id = service.tenant_id
    model = service.model if service.model_id else None
    runtime = service.runtime if service.runtime_id else None

    if service.name and tenant_id:
        clash = type(service).objects.filter(tenant_id=tenant_id, name=service.name).exclude(pk=service.pk)
        if clash.exists():
            errors["name"].append(
                ValidationError(
                    f"A service named {service.name!r} already exists in this tenant.", code="unique"
                )
            )

    _cluster_errors(service, errors)

    # Catalog entries: platform-wide or the service's own tenant.
    for field, entry in (("model", model), ("runtime", runtime)):
        if entry is not None and entry.tenant_id not in (None, tenant_id):
            errors[field].append(
                f"This {field} belongs to another tenant; use a platform-wide one or your own."
            )
    if len(adapters) > MAX_ADAPTERS:
        errors["adapters"].append(f"A service may serve at most {MAX_ADAPTERS} adapters.")
    for adapter in adapters:
        if adapter.tenant_id not in (None, tenant_id):
            errors["adapters"].append(f"Adapter {adapter.name!r} belongs to another tenant.")
        if model is not None and adapter.base_model_id != model.pk:
            errors["adapters"].append(
                f"Adapter {adapter.name!r} is for model {adapter.base_model.name!r}, not {model.name!r}."
            )

    if runtime is not None:
        _local_source_errors(runtime.engine, model, adapters, errors)
        if service.deployment_mode and service.deployment_mode not in runtime.supported_modes:
            errors["deployment_mode"].append(
                f"Runtime {runtime.name!r} does not support {service.deployment_mode}; "
                f"it supports {', '.join(runtime.supported_modes)}."
            )
        needed_engine = ENGINE_ONLY_ROUTING.get(service.routing_policy)
        offered = sorted({RoutingPolicy.ROUND_ROBIN, *ROUTER_POLICIES.get(runtime.engine, {})})
        if needed_engine and runtime.engine != needed_engine:
            errors["routing_policy"].append(
                f"{service.routing_policy} routing needs a {needed_engine} runtime, not {runtime.engine}."
            )
        elif service.routing_policy and service.routing_policy not in offered:
            errors["routing_policy"].append(
                f"The {runtime.engine} router has no {service.routing_policy} routing; it offers "
                f"{', '.join(offered)}."
            )

    settings = _engine_settings(service, runtime, model, errors)
    errors["autoscaling"].extend(
        autoscaling_errors(
            service.autoscaling, serverless=service.deployment_mode == DeploymentMode.SERVERLESS
        )
    )
    errors["autoscaling"].extend(idle_engine_errors(service.autoscaling, runtime.engine if runtime else None))
    errors["rollout"].extend(
        rollout_errors(service.rollout, serverless=service.deployment_mode == DeploymentMode.SERVERLESS)
    )
    _pool_errors(service, pools, settings, errors)
    if not errors.get("pools") and not errors.get("engine_settings"):
        _cpu_real_errors(model, runtime, settings, pools, errors)
    _kv_offload_errors(service, pools, settings, errors)
    _draft_model_errors(service, settings, errors)
    if not errors.get("pools") and not errors.get("engine_settings"):
        _capacity_errors(service, pools, settings, model, runtime, errors)
    if not errors.get("pools"):
        _quota_errors(service, pools, errors)
    _priority_errors(service, errors)
    return {field: messages for field, messages in errors.items() if messages}


def _local_source_errors(engine: str, model, adapters: list, errors) -> None:
    """A `local://` source is read only by vLLM: SGLang's adapters reach it through the template's fetch."""
    if engine == "vllm":
        return
    if model is not None and is_local(model.source_uri):
        errors["model"].append(f"Model {model.name!r} has a local:// source, which only vLLM runtimes read; "
                               f"this runtime's engine is {engine}.")
    for adapter in adapters:
        if is_local(adapter.source_uri):
            errors["adapters"].append(f"Adapter {adapter.name!r} has a local:// source, which only vLLM runtimes "
                                      f"read; this runtime's engine is {engine}.")


def _cpu_real_errors(model, runtime, settings, pools, errors) -> None:
    """A vLLM service of a `local://` model runs on cpu-real nodes (apps/serving/cpureal.py): a flag vLLM's CPU build
    cannot honour is refused here with the reason (enginevocab.cpubuild, the table kubesim's nodes admit by),
    under `engine_settings` when the settings alone render it, else under `pools` (the pool's shape or role)."""
    if model is None or runtime is None or settings is None or not on_cpu_real(runtime.engine, model.source_uri):
        return
    adapter, where = get_adapter(runtime.engine), "cpu-real nodes, where this local:// model runs"
    own = refusal(adapter.flags(settings, model_path="model", served_name="model",
                                default_args=runtime.default_args or (), tag=runtime.tag), where)
    if own:
        errors["engine_settings"].append(own)
        return
    for pool in pools:
        shape = effective_parallelism(pool.gpus_per_replica, pool.nodes_per_replica, settings.tensor_parallel_size,
                                      settings.pipeline_parallel_size, engine=runtime.engine)
        args = adapter.flags(settings, model_path="model", served_name="model", parallelism=shape,
                             role=pool.role if pool.role in ("prefill", "decode") else None, tag=runtime.tag)
        refused = refusal([*args, "--nnodes", str(pool.nodes_per_replica)], where)
        if refused:
            errors["pools"].append(f"{pool.role}: {refused}.")


def _cluster_errors(service, errors) -> None:
    """Only clusters staff opened to the tenant; and a service never changes cluster, because its objects
    on the old cluster would keep their GPUs outside any quota (delete and create it on the new one)."""
    if not service.cluster_id:
        return
    # Availability first: a move to a cluster the tenant may not use must read like one to no cluster.
    if service.tenant_id and not Cluster.objects.usable_by_tenant(service.tenant_id).filter(
            pk=service.cluster_id).exists():
        errors["cluster"].append(unavailable_cluster_message(service.cluster.name))
        return
    if service.pk:
        stored = type(service)._default_manager.filter(pk=service.pk).values_list("cluster_id", flat=True).first()
        if stored is not None and stored != service.cluster_id:
            errors["cluster"].append(
                "A service cannot move to another cluster: its workloads would stay behind on the old one. "
                "Create a new service on the other cluster and delete this one."
            )


def _engine_settings(service, runtime, model, errors):
    """Parse and validate engine settings with the engine's adapter; returns them or None."""
    try:
        settings = EngineSettings.from_dict(service.engine_settings)
    except EngineSettingsError as exc:
        errors["engine_settings"].extend(f"{name}: {reason}" for name, reason in exc.errors.items())
        return None
    if runtime is not None:
        problems = get_adapter(runtime.engine).validate(
            settings, max_context=model.max_context if model else None, tag=runtime.tag
        )
        if "extra_args" in problems and _extra_args_unchanged(service):
            # Saved before the engine-argument policy: keep it running and editable; service_warnings
            # flags the arguments on the page and in the API until they are changed.
            problems.pop("extra_args")
        errors["engine_settings"].extend(f"{name}: {reason}" for name, reason in problems.items())
    return settings


def _extra_args_unchanged(service) -> bool:
    if not service.pk:
        return False
    stored = type(service)._default_manager.filter(pk=service.pk).values("runtime_id", "engine_settings").first()
    if stored is None:
        return False
    args = (stored["engine_settings"] or {}).get("extra_args")
    return stored["runtime_id"] == service.runtime_id and args == (service.engine_settings or {}).get("extra_args")


def _pool_errors(service, pools, settings, errors) -> None:
    roles = [p.role for p in pools]
    wanted = MODE_POOL_ROLES.get(service.deployment_mode)
    if wanted is not None and set(roles) != wanted:
        errors["pools"].append(
            f"A {service.deployment_mode} service needs exactly the pools {', '.join(sorted(wanted))}; "
            f"got {', '.join(sorted(roles)) or 'none'}."
        )
    if len(roles) != len(set(roles)):
        errors["pools"].append("Each pool role may appear once.")
    engine = service.runtime.engine if service.runtime_id else "vllm"
    for pool in pools:
        try:
            pool.clean_fields(exclude={"service"})
            pool.clean()
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors["pools"].extend(f"{pool.role}.{field}: {m}" for m in messages)
            continue
        multi_node = service.deployment_mode == DeploymentMode.MULTI_NODE
        if multi_node and pool.nodes_per_replica < 2:
            errors["pools"].append(
                f"{pool.role}.nodes_per_replica: a multi-node replica spans at least 2 nodes."
            )
        if not multi_node and pool.nodes_per_replica != 1:
            errors["pools"].append(
                f"{pool.role}.nodes_per_replica: only multi-node services span several nodes."
            )
        if settings is not None:
            try:
                effective_parallelism(pool.gpus_per_replica, pool.nodes_per_replica, settings.tensor_parallel_size,
                                      settings.pipeline_parallel_size, engine=engine)
            except ParallelismError as exc:
                errors["engine_settings"].append(f"{exc.field}: {pool.role} pool: {exc.message}.")
        if pool.min_replicas == 0 and service.deployment_mode != DeploymentMode.SERVERLESS:
            errors["pools"].append(f"{pool.role}.min_replicas: only serverless services scale to zero.")


# Why a prefill/decode pair cannot have the KV cache's CPU tier, per engine.
PD_REFUSALS = {
    "vllm": "vLLM's offloading takes the KV connector that disaggregated prefill/decode uses (NixlConnector)",
    "sglang": "SGLang's decode server runs without the radix cache, which HiCache extends",
}


def _kv_offload_errors(service, pools, settings, errors) -> None:
    """The KV-cache CPU tier where the engine accepted it: not in a P/D pair (vLLM: its NIXL connector is vLLM's
    one KV connector; SGLang: the decode side forces the chunk cache), and within what a node of each pool's
    GPU type, with as many GPUs as a replica, can allocate to the engine container (the pod's memory request,
    `rendering.pods`)."""
    kv = settings.kv_offload if settings is not None else None
    if kv is None or errors.get("engine_settings"):
        return
    engine = service.runtime.engine if service.runtime_id else None
    if service.deployment_mode == DeploymentMode.PD_DISAGGREGATED and engine in PD_REFUSALS:
        errors["engine_settings"].append(f"kv_offload: {PD_REFUSALS[engine]}; a P/D service cannot have a CPU tier")
        return
    refused = kvoffload.model_error(kv, engine, service.model.kv_layout) if service.model_id else None
    if refused:
        errors["engine_settings"].append(f"kv_offload: {refused} (model {service.model.name}: "
                                         f"kv_layout {service.model.kv_layout})")
        return
    for pool in pools:
        try:
            gpu = gpu_for(pool.gpu_type)
        except ValueError:
            continue  # the pool's own error names the GPU type
        if not pool.gpus_per_replica or pool.gpus_per_replica < 1:
            continue  # so does a replica without GPUs
        refused = kvoffload.host_error(kv, gpus=pool.gpus_per_replica, gpu_short=gpu.short,
                                       allocatable_gib=node_allocatable_memory_gib(gpu, pool.gpus_per_replica))
        if refused:
            errors["engine_settings"].append(f"kv_offload: {pool.role} pool: {refused}")


def _draft_model_errors(service, settings, errors) -> None:
    """A draft model for speculative decoding is a model of the catalog the tenant may use, by name: the pod fetches
    its weights like the service's own, and the engine never loads what a tenant typed (its code or its files)."""
    from apps.catalog.models import Model

    name = settings.speculative_model if settings is not None else None
    if name is None or errors.get("engine_settings"):
        return
    draft = Model.objects.named_for_tenant(service.tenant_id, name)
    if draft is None:
        errors["engine_settings"].append(f"speculative_model: {name!r} is not a model of the catalog this tenant "
                                         "may use; name a platform-wide model or one of the tenant's own")
    elif service.model_id and draft.pk == service.model_id:
        errors["engine_settings"].append("speculative_model: the draft model must be another, smaller model")


def _capacity_errors(service, pools, settings, model, runtime, errors) -> None:
    """Refuse what cannot run (weights or max_model_len beyond the GPUs' memory, apps/serving/capacity.py).

    A saved service whose capacity-relevant spec does not change is not refused: it was admitted before,
    and `service_warnings` flags it on the page and in the API instead.
    """
    from apps.serving.capacity import admission, draft_of

    if model is None or runtime is None or settings is None:
        return
    found, _warnings = admission(model, runtime.engine, settings, pools, draft_of(service.tenant_id, settings))
    if not found or _capacity_spec_unchanged(service, pools):
        return
    for field, messages in found.items():
        errors[field].extend(messages)


def _capacity_spec_unchanged(service, pools) -> bool:
    if not service.pk:
        return False
    stored = type(service).objects.filter(pk=service.pk).values("model_id", "runtime_id", "engine_settings").first()
    if stored is None:
        return False
    shape = ("role", "gpu_type", "gpus_per_replica", "nodes_per_replica")
    stored_pools = sorted(service.pools.model.objects.filter(service_id=service.pk).values_list(*shape))
    return (
        stored == {"model_id": service.model_id, "runtime_id": service.runtime_id,
                   "engine_settings": service.engine_settings}
        and stored_pools == sorted(tuple(getattr(p, f) for f in shape) for p in pools)
    )


def _quota_errors(service, pools, errors) -> None:
    """The tenant's services under one queue, at their maximum replicas, must fit each quota entry's ceiling
    (nominal plus what the queue may borrow). A canary runs the new revision beside the stable one, which keeps
    its replicas until promotion, so it counts the service twice: a rollout that could not fit is refused now
    (under `rollout`) rather than left pending."""
    if not service.tenant_id or not service.cluster_id:
        return
    queue = queue_for(service.tenant_id, service.cluster_id)
    if queue is None:
        errors["pools"].append(f"Tenant {service.tenant.slug} has no GPU quota on cluster {service.cluster.name}: "
                               "staff give it a queue there (or one for every cluster).")
        return
    others = covered_services(queue)
    if service.pk:
        others = others.exclude(pk=service.pk)
    pool_model = type(service)._meta.get_field("pools").related_model  # validation is imported by the models
    used = held(queue, pool_model.objects.filter(service__in=others))
    requested = held(queue, pools)
    for key, wanted in sorted(requested.items()):
        allowed, taken, gpus = queue.ceiling(key), used[key], entry_words(key)
        if taken + wanted > allowed:
            errors["pools"].append(
                f"GPU quota exceeded for tenant {service.tenant.slug}: requested {wanted} {gpus} at maximum "
                f"replicas, {taken} already used by other services, {allowed} allowed."
            )
        elif is_canary(service.rollout) and not errors.get("rollout") and taken + 2 * wanted > allowed:
            errors["rollout"].append(
                f"strategy: a canary runs both revisions at once, which needs 2 × {wanted} = {2 * wanted} {gpus} at "
                f"maximum replicas for tenant {service.tenant.slug}; with {taken} used by other services and "
                f"{allowed} allowed, only {allowed - taken} are free. Use the rolling strategy, or lower the pools' "
                "max_replicas."
            )


def _priority_errors(service, errors) -> None:
    """A service runs at most at its tenant's highest class."""
    named = service.priority_class if service.priority_class_id else None
    highest = service.tenant.max_priority_class if service.tenant_id else None
    if named is not None and highest is not None and named.value > highest.value:
        errors["priority_class"].append(
            f"{named.name} ({named.value}) is above tenant {service.tenant.slug}'s highest class, "
            f"{highest.name} ({highest.value}).")
