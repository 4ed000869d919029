"""CRUD through the API for every resource, generated from tests.api.crud.CrudTests."""

from __future__ import annotations

from apps.core.choices import Role
from tests.api.crud import CrudTests
from tests.factories import (
    QWEN25_7B_ARCH,
    AdapterFactory,
    ClusterFactory,
    InferenceServiceFactory,
    MembershipFactory,
    ModelFactory,
    RuntimeFactory,
    TenantFactory,
    UserFactory,
    issue_token,
)


class TestTenantCrud(CrudTests):
    resource = "tenants"
    lookup = "slug"

    def make(self, world):
        return TenantFactory(slug="charlie")

    def create_payload(self, world):
        return {"slug": "delta", "name": "Delta", "max_priority_class": "standard"}

    def update_payload(self, world):
        return {"name": "Charlie Team", "description": "The platform team"}


class TestMembershipCrud(CrudTests):
    resource = "memberships"
    actor = "owner_a"
    lookup = "id"

    def make(self, world):
        return MembershipFactory(tenant=world["tenant"], user=UserFactory(username="newcomer"))

    def create_payload(self, world):
        UserFactory(username="joiner")
        return {"tenant": "alpha", "user": "joiner", "role": Role.OPERATOR}

    def update_payload(self, world):
        return {"role": Role.OPERATOR}


class TestApiTokenCrud(CrudTests):
    resource = "tokens"
    actor = "owner_a"

    def make(self, world):
        return issue_token(world["owner"], world["tenant"], name="nightly-job")[0]

    def create_payload(self, world):
        return {"name": "ci", "tenant": "alpha"}

    def update_payload(self, world):
        return {"name": "renamed"}


class TestModelCrud(CrudTests):
    resource = "models"
    actor = "operator_a"

    def make(self, world):
        return ModelFactory(tenant=world["tenant"], name="alpha-finetune")

    def create_payload(self, world):
        return {
            "tenant": "alpha",
            "name": "qwen2-5-7b",
            "source_uri": "hf://Qwen/Qwen2.5-7B-Instruct@main",
            "license": "apache-2.0",
            **QWEN25_7B_ARCH,
            "dtype": "bfloat16",
        }

    def update_payload(self, world):
        return {"license": "mit", "max_context": 16384}


class TestAdapterCrud(CrudTests):
    resource = "adapters"
    actor = "owner_a"

    def make(self, world):
        return AdapterFactory(tenant=world["tenant"], base_model=world["model"], name="sql-lora")

    def create_payload(self, world):
        return {
            "tenant": "alpha",
            "name": "chat-lora",
            "base_model": world["model"].pk,
            "source_uri": "pvc://adapters/chat-lora",
            "rank": 8,
        }

    def update_payload(self, world):
        return {"rank": 32}


class TestRuntimeCrud(CrudTests):
    resource = "runtimes"

    def make(self, world):
        return RuntimeFactory(name="sglang-main", engine="sglang", image="lmsysorg/sglang", tag="v0.5.23")

    def create_payload(self, world):
        return {
            "name": "vllm-nightly",
            "engine": "vllm",
            "image": "vllm/vllm-openai",
            "tag": "nightly",
            "default_args": ["--disable-fastapi-docs"],
            "supported_modes": ["standard", "serverless"],
        }

    def update_payload(self, world):
        return {"tag": "v0.33.1"}


class TestClusterCrud(CrudTests):
    resource = "clusters"

    def make(self, world):
        return ClusterFactory(name="gpu-east")

    def create_payload(self, world):
        return {"name": "gpu-west", "api_url": "https://k8s.west.example.com:6443", "bearer_token": "t0ken"}

    def update_payload(self, world):
        return {"has_gateway": True, "description": "West coast H100s"}


class TestInferenceServiceCrud(CrudTests):
    resource = "services"
    actor = "operator_a"
    delete_status = 202

    def make(self, world):
        return InferenceServiceFactory(
            tenant=world["tenant"],
            name="chat",
            cluster=world["cluster"],
            model=world["model"],
            runtime=world["runtime"],
        )

    def create_payload(self, world):
        return {
            "tenant": "alpha",
            "name": "summarizer",
            "cluster": "sim",
            "model": world["model"].pk,
            "runtime": world["runtime"].pk,
            "engine_settings": {"max_model_len": 8192},
            "pools": [
                {
                    "role": "engine",
                    "replicas": 2,
                    "min_replicas": 1,
                    "max_replicas": 4,
                    "gpus_per_replica": 1,
                    "gpu_type": "l40s-48gb",
                }
            ],
        }

    def update_payload(self, world):
        return {"routing_policy": "prefix_aware", "engine_settings": {"enable_prefix_caching": True}}

    def assert_deleted(self, model, pk):
        # Deletion is a request: the reconciler removes the Kubernetes objects, then the row.
        service = model.objects.get(pk=pk)
        assert service.phase == "Deleting"
        assert service.deletion_requested_at is not None
