"""`spec_from_service` against the real database and the `render` management command."""

import json
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from apps.catalog.engines import EngineSettings
from apps.serving.models import InferenceService
from apps.serving.rendering import render_service, spec_from_service
from tests.factories import (
    AdapterFactory,
    ClusterFactory,
    InferenceServiceFactory,
    ModelFactory,
    RuntimeFactory,
    TenantFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def service():
    tenant = TenantFactory(slug="acme", gpu_quota=24)
    model = ModelFactory(name="llama-3-1-8b")
    svc = InferenceServiceFactory(
        tenant=tenant, name="chat", model=model, cluster=ClusterFactory(has_gateway=True),
        runtime=RuntimeFactory(engine="sglang", image="lmsysorg/sglang", tag="v0.5.23",
                               default_args=["--log-level", "warning"]),
        deployment_mode="pd_disaggregated", routing_policy="cache_aware",
        engine_settings={"max_model_len": 8192, "kv_cache_dtype": "fp8_e4m3"},
        pools=[{"role": "prefill", "gpu_type": "h100-sxm-80gb"},
               {"role": "decode", "replicas": 2, "max_replicas": 4, "gpu_type": "h100-sxm-80gb"}],
    )
    svc.adapters.add(AdapterFactory(name="sql", base_model=model, source_uri="s3://adapters/sql", rank=8))
    return svc


def test_spec_from_service_reads_every_related_row_in_four_queries(service, django_assert_num_queries):
    with django_assert_num_queries(4):  # service with tenant/cluster/model/runtime; pools; adapters; tenant queue
        spec = spec_from_service(InferenceService(pk=service.pk))
    assert (spec.tenant, spec.tenant_gpu_quota, spec.name, spec.namespace) == ("acme", 24, "chat", "tenant-acme")
    assert spec.uid == str(service.uid) and spec.generation == service.generation
    assert (spec.mode, spec.engine, spec.image_ref) == ("pd_disaggregated", "sglang", "lmsysorg/sglang:v0.5.23")
    assert spec.runtime_args == ("--log-level", "warning")
    assert spec.model.parameters == 8_030_000_000 and spec.model.max_context == 131072
    assert spec.model.source_uri == "hf://meta-llama/Llama-3.1-8B-Instruct"
    assert spec.settings == EngineSettings(max_model_len=8192, kv_cache_dtype="fp8_e4m3")
    assert [(p.role, p.replicas, p.max_replicas) for p in spec.pools] == [("decode", 2, 4), ("prefill", 1, 4)]
    assert [(a.name, a.source_uri, a.rank) for a in spec.adapters] == [("sql", "s3://adapters/sql", 8)]
    assert spec.routing == "cache_aware" and spec.has_gateway is True
    assert spec.autoscaling.autoscaler == "none"


def test_render_prints_the_services_objects_as_yaml(service):
    out = StringIO()
    call_command("render", "acme/chat", stdout=out)
    docs = list(yaml.safe_load_all(out.getvalue()))
    assert docs == render_service(spec_from_service(service))
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("Deployment", "chat-prefill"), ("Deployment", "chat-decode"), ("Deployment", "chat-router"),
            ("HTTPRoute", "chat"), ("ResourceQuota", "gpu-quota")} <= names


def test_render_json_is_a_list(service):
    out = StringIO()
    call_command("render", "acme/chat", "--format", "json", stdout=out)
    listed = json.loads(out.getvalue())
    assert listed["kind"] == "List"
    prefill = next(i for i in listed["items"] if i["metadata"]["name"] == "chat-prefill" and i["kind"] == "Deployment")
    args = prefill["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--model-path", "/models/Llama-3.1-8B-Instruct"]
    assert "--lora-paths" in args and "--disaggregation-mode" in args


def test_render_all_prints_each_tenant_object_once(service):
    other = InferenceServiceFactory(tenant=service.tenant, name="embed", cluster=service.cluster)
    out = StringIO()
    call_command("render", "--all", stdout=out)
    docs = list(yaml.safe_load_all(out.getvalue()))
    assert [d["kind"] for d in docs].count("Namespace") == 1
    uids = {d["metadata"]["labels"].get("controlplane.io/service-uid") for d in docs}
    assert {str(service.uid), str(other.uid)} <= uids


def test_unknown_service_is_a_clear_error(service):
    with pytest.raises(CommandError, match="no service 'nope' in tenant 'acme'"):
        call_command("render", "acme/nope")
    with pytest.raises(CommandError, match="expected TENANT/SERVICE"):
        call_command("render", "chat")
    with pytest.raises(CommandError, match="either TENANT/SERVICE or --all"):
        call_command("render")


def test_a_service_the_router_cannot_serve_fails_with_the_reason(service):
    InferenceService.objects.filter(pk=service.pk).update(routing_policy="session")
    with pytest.raises(CommandError, match="SGLang router has no session policy"):
        call_command("render", "acme/chat", stdout=StringIO())
