"""factory_boy factories for the domain model. Defaults are valid: a factory-built service passes clean()."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from apps.catalog.choices import DeploymentMode, EngineKind
from apps.catalog.models import Adapter, Model, Runtime
from apps.clusters.models import Cluster
from apps.core.choices import Role
from apps.serving.models import InferenceService, Pool
from apps.tenancy.models import ApiToken, Membership, Tenant
from apps.tenancy.queues import set_gpu_quota

PASSWORD = "correct-horse-battery-staple"
# Qwen2.5-7B-Instruct's dimensions as its config.json gives them: the catalog fields of a second model.
QWEN25_7B_ARCH = {
    "parameters_billions": 7.62,
    "layers": 28,
    "hidden_size": 3584,
    "attention_heads": 28,
    "kv_heads": 4,
    "head_dim": 128,
    "max_context": 32768,
}


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def save_password(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.replace("-", " ").title())

    @factory.post_generation
    def gpu_quota(obj, create, extracted, **kwargs):
        """The tenant's queue on every cluster, as a former GPU quota became (64 GPUs of any type by default)."""
        if create:
            set_gpu_quota(obj, 64 if extracted is None else extracted)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.VIEWER


class ModelFactory(factory.django.DjangoModelFactory):
    """Llama 3.1 8B's published architecture, platform-wide unless a tenant is given."""

    class Meta:
        model = Model

    tenant = None
    name = factory.Sequence(lambda n: f"llama-3-1-8b-{n}")
    source_uri = "hf://meta-llama/Llama-3.1-8B-Instruct"
    license = "llama3.1"
    parameters_billions = 8.03
    layers = 32
    hidden_size = 4096
    attention_heads = 32
    kv_heads = 8
    head_dim = 128
    max_context = 131072


class AdapterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Adapter

    tenant = None
    name = factory.Sequence(lambda n: f"lora-{n}")
    base_model = factory.SubFactory(ModelFactory)
    source_uri = "s3://adapters/sql-lora"
    rank = 16


class RuntimeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Runtime

    tenant = None
    name = factory.Sequence(lambda n: f"vllm-{n}")
    engine = EngineKind.VLLM
    image = "vllm/vllm-openai"
    tag = "v0.33.0"
    supported_modes = factory.LazyFunction(lambda: list(DeploymentMode.values))


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster

    name = factory.Sequence(lambda n: f"cluster-{n}")
    api_url = "http://127.0.0.1:6443"
    insecure_simulator = True
    node_model_volume = "csi"  # kubesim's kubelet mounts any volume; real clusters default to "none"
    # Tests about something else deploy anywhere; tests of cluster access set it to False.
    open_to_all_tenants = True


class InferenceServiceFactory(factory.django.DjangoModelFactory):
    """A standard service with one engine pool (replicas 1, min 1, max 4, 1 GPU)."""

    class Meta:
        model = InferenceService
        skip_postgeneration_save = True

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"svc-{n}")
    cluster = factory.SubFactory(ClusterFactory)
    model = factory.SubFactory(ModelFactory)
    runtime = factory.SubFactory(RuntimeFactory)

    @factory.post_generation
    def pools(obj, create, extracted, **kwargs):
        if not create:
            return
        for spec in extracted if extracted is not None else [{"role": "engine"}]:
            PoolFactory(service=obj, **spec)


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool

    service = factory.SubFactory(InferenceServiceFactory, pools=[])
    role = "engine"
    replicas = 1
    min_replicas = 1
    max_replicas = 4
    gpus_per_replica = 1


def issue_token(user, tenant=None, *, expires_days=None, name="") -> tuple[ApiToken, str]:
    """Create a token and return it with its plaintext."""
    token, plaintext = ApiToken.generate(user=user, tenant=tenant, name=name, expires_days=expires_days)
    token.save()
    return token, plaintext
