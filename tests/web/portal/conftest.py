"""Fixtures of the portal tests: a tenant with a service, and the URLs of every portal page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.serving.actions import save_service
from apps.serving.models import InferenceService
from apps.serving.rendering.spec import PoolSpec
from tests.factories import AdapterFactory, ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory
from tests.web.conftest import login  # noqa: F401 (shared fixture)
from tests.workers.conftest import kubesim_url, workers  # noqa: F401 (a kubesim process and Celery workers)


@pytest.fixture
def catalog_a(tenant_a):
    """A platform-wide model and runtime, and a private model, adapter and runtime of tenant A."""
    return {
        "model": ModelFactory(name="llama-shared"),
        "runtime": RuntimeFactory(name="vllm-shared"),
        "private_model": ModelFactory(name="alpha-model", tenant=tenant_a),
        "private_adapter": AdapterFactory(name="alpha-lora", tenant=tenant_a, base_model=ModelFactory(
            name="alpha-base", tenant=tenant_a)),
        "private_runtime": RuntimeFactory(name="alpha-vllm", tenant=tenant_a),
    }


@pytest.fixture
def cluster(db):
    return ClusterFactory(name="sim")


@pytest.fixture
def service_a(tenant_a, cluster, catalog_a):
    return InferenceServiceFactory(tenant=tenant_a, name="chat", cluster=cluster, model=catalog_a["model"],
                                   runtime=catalog_a["runtime"])


@pytest.fixture
def revised(tenant_a, cluster, catalog_a, owner_a):
    """chat at revision 1 on vllm-shared, then revision 2 on vllm-next."""
    service = save_service(
        InferenceService(tenant=tenant_a, name="chat", cluster=cluster, model=catalog_a["model"],
                         runtime=catalog_a["runtime"]),
        pools=[PoolSpec("engine", max_replicas=2)], adapters=[], actor=owner_a, via="api")
    service = InferenceService.objects.get(pk=service.pk)
    service.runtime = RuntimeFactory(name="vllm-next", tag="v0.34.0")
    return save_service(service, pools=[PoolSpec("engine", max_replicas=2)], adapters=[], actor=owner_a, via="api")


def page_urls(tenant: str, service: str, token_pk: int, member_pk: int, entry_pk: int) -> list[str]:
    """Every portal page (GET) of one tenant."""
    s = [tenant, service]
    return [
        reverse("web:overview", args=[tenant]),
        reverse("web:tenant-services", args=[tenant]),
        reverse("web:service-create", args=[tenant]),
        reverse("web:service", args=s),
        reverse("web:service-series", args=s),
        reverse("web:service-edit", args=s),
        reverse("web:service-scale", args=s),
        reverse("web:service-delete", args=s),
        reverse("web:service-revisions", args=s),
        reverse("web:playground", args=s),
        reverse("web:tokens", args=[tenant]),
        reverse("web:inference-keys", args=[tenant]),
        reverse("web:usage", args=[tenant]),
        reverse("web:members", args=[tenant]),
        reverse("web:catalog", args=[tenant, "models"]),
        reverse("web:catalog", args=[tenant, "adapters"]),
        reverse("web:catalog", args=[tenant, "runtimes"]),
        reverse("web:catalog-create", args=[tenant, "models"]),
        reverse("web:catalog-edit", args=[tenant, "models", entry_pk]),
        reverse("web:audit", args=[tenant]),
    ]
