"""Property: every service the model's own validation accepts renders objects that the official Kubernetes
1.33 schemas accept (kubernetes-validate, strict). Hypothesis draws the spec; `InferenceService.clean()`
(through `service_errors`) decides what is valid, so the property covers exactly what a user can save."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest
from django.db import transaction
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from apps.catalog.choices import DeploymentMode, EngineKind
from apps.catalog.engines import get_adapter
from apps.serving.autoscaling_spec import TARGETS
from apps.serving.choices import MODE_POOL_ROLES, GpuType, RoutingPolicy
from apps.serving.models import InferenceService, Pool
from apps.serving.rendering import render_service, spec_from_service
from apps.serving.validation import service_errors
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory, TenantFactory
from tests.serving.test_render_schema import BUILT_IN_GROUPS, CUSTOM

SOURCES = ("hf://meta-llama/Llama-3.1-8B-Instruct@main", "s3://models/llama-3.1-8b", "pvc://shared/llama-3.1-8b")


class Rollback(Exception):
    """Leaves the example's rows behind in a rolled-back savepoint."""


@st.composite
def pools(draw, mode):
    out = []
    multi_node = mode == DeploymentMode.MULTI_NODE
    for role in sorted(MODE_POOL_ROLES[mode]):
        low = draw(st.integers(0 if mode == DeploymentMode.SERVERLESS else 1, 3))
        replicas = draw(st.integers(low, low + 3))
        out.append(Pool(role=role, min_replicas=low, replicas=replicas, max_replicas=draw(st.integers(replicas, 6)),
                        gpus_per_replica=draw(st.sampled_from([1, 2, 4, 8])),
                        gpu_type=draw(st.sampled_from(GpuType.values)),
                        nodes_per_replica=draw(st.integers(2, 4)) if multi_node else 1))
    return out


@st.composite
def engine_settings(draw, engine):
    adapter = get_adapter(engine)
    chosen = {
        "max_model_len": st.integers(256, 131072),
        "kv_cache_dtype": st.sampled_from(adapter.kv_cache_dtypes),
        "enable_prefix_caching": st.booleans(),
        "enable_chunked_prefill": st.booleans(),
        "gpu_memory_utilization": st.floats(0.5, 0.95),
        "max_num_seqs": st.integers(1, 512),
        "tensor_parallel_size": st.sampled_from([1, 2, 4, 8]),
    }
    keys = draw(st.sets(st.sampled_from(sorted(chosen))))
    return {key: draw(chosen[key]) for key in sorted(keys)}


@st.composite
def autoscaling(draw):
    autoscaler = draw(st.sampled_from(["none", "builtin", "hpa", "keda"]))
    if autoscaler == "none":
        return {"autoscaler": "none"}
    names = draw(st.sets(st.sampled_from(sorted(TARGETS)), min_size=1))
    targets = {name: draw(st.floats(0.05, 1.0) if TARGETS[name][1] == 1 else st.floats(0.1, 64.0))
               for name in sorted(names)}
    out = {"autoscaler": autoscaler, "targets": targets}
    if draw(st.booleans()):
        out["scale_down_stabilization_seconds"] = draw(st.integers(0, 3600))
    return out


@st.composite
def services(draw):
    engine = draw(st.sampled_from(EngineKind.values))
    mode = draw(st.sampled_from(DeploymentMode.values))
    return {
        "engine": engine, "mode": mode, "pools": draw(pools(mode)), "settings": draw(engine_settings(engine)),
        "routing": draw(st.sampled_from(RoutingPolicy.values)), "autoscaling": draw(autoscaling()),
        "source": draw(st.sampled_from(SOURCES)), "gateway": draw(st.booleans()),
        "cidrs": draw(st.lists(st.sampled_from(["10.0.0.5/32", "192.168.0.0/24", "fd00::1/128"]), unique=True,
                               max_size=2)),
    }


@pytest.fixture
def world(db):
    return {
        "tenant": TenantFactory(slug="acme", gpu_quota=10_000),
        "runtimes": {"vllm": RuntimeFactory(name="vllm"),
                     "sglang": RuntimeFactory(name="sglang", engine="sglang", image="lmsysorg/sglang", tag="v0.5.23")},
        "models": {uri: ModelFactory(name=f"llama-{i}", source_uri=uri) for i, uri in enumerate(SOURCES)},
        "clusters": {flag: ClusterFactory(name=f"sim-{int(flag)}", has_gateway=flag) for flag in (False, True)},
    }


def validate(obj: dict) -> None:
    if obj["apiVersion"] in BUILT_IN_GROUPS:
        kubernetes_validate.validate(obj, "1.33", strict=True)
    else:
        assert CUSTOM[obj["apiVersion"]] == obj["kind"] and obj["spec"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(drawn=services())
def test_every_valid_service_renders_objects_the_kubernetes_schemas_accept(world, drawn):
    service = InferenceService(
        tenant=world["tenant"], name="chat", cluster=world["clusters"][drawn["gateway"]],
        model=world["models"][drawn["source"]], runtime=world["runtimes"][drawn["engine"]],
        deployment_mode=drawn["mode"], engine_settings=drawn["settings"], routing_policy=drawn["routing"],
        autoscaling=drawn["autoscaling"],
    )
    assume(not service_errors(service, drawn["pools"], []))  # only what the API would accept
    try:
        with transaction.atomic():
            service.save()
            for pool in drawn["pools"]:
                pool.service = service
                pool.save()
            spec = dataclasses.replace(spec_from_service(service), api_server_cidrs=tuple(drawn["cidrs"]))
            for obj in render_service(spec):
                validate(obj)
            raise Rollback
    except Rollback:
        pass
