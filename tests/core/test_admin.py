"""The admin door: every model has working pages, writes are audited (via=admin), the service form
validates the whole spec, credentials are write-only and each object shows its audit history."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from apps.clusters.models import Cluster
from apps.core.models import AuditEntry
from apps.serving.models import InferenceService, Pool
from apps.tenancy.models import PriorityClass, Tenant
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory

OUR_MODELS = [
    m for m in admin.site._registry if m._meta.app_label in {"core", "tenancy", "catalog", "clusters", "serving"}
]


@pytest.fixture
def browser(staff):
    client = Client()
    client.force_login(staff)
    return client


def admin_url(model, view, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.mark.parametrize("model", OUR_MODELS, ids=lambda m: m.__name__)
def test_changelist_renders_with_filters_and_search(browser, model):
    response = browser.get(admin_url(model, "changelist"), {"q": "x"})
    assert response.status_code == 200


def test_every_domain_model_is_registered():
    names = {m.__name__ for m in OUR_MODELS}
    assert {
        "Tenant",
        "Membership",
        "ApiToken",
        "Model",
        "Adapter",
        "Runtime",
        "Cluster",
        "GpuNode",
        "InferenceService",
        "AuditEntry",
    } <= names


NO_INLINES = {"memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0, "queues-TOTAL_FORMS": 0,
              "queues-INITIAL_FORMS": 0}


def test_tenant_create_update_delete_are_audited(browser):
    standard, production = PriorityClass.objects.get(name="standard"), PriorityClass.objects.get(name="production")
    browser.post(
        admin_url(Tenant, "add"),
        {"slug": "echo", "name": "Echo", "max_priority_class": standard.pk, **NO_INLINES},
    )
    tenant = Tenant.objects.get(slug="echo")
    browser.post(
        admin_url(Tenant, "change", tenant.pk),
        {
            "slug": "echo",
            "name": "Echo Team",
            "max_priority_class": production.pk,
            **NO_INLINES,
        },
    )
    browser.post(admin_url(Tenant, "delete", tenant.pk), {"post": "yes"})
    entries = AuditEntry.objects.filter(object_id=str(tenant.pk), via="admin", content_type__model="tenant")
    assert sorted(entries.values_list("action", flat=True)) == ["create", "delete", "update"]
    update = entries.get(action="update")
    assert (update.before["max_priority_class"], update.after["max_priority_class"]) == (standard.pk, production.pk)


@pytest.fixture
def service_form(tenant_a):
    cluster, model, runtime = ClusterFactory(name="sim"), ModelFactory(), RuntimeFactory()

    def build(**pool):
        data = {
            "tenant": tenant_a.pk,
            "name": "admin-svc",
            "cluster": cluster.pk,
            "model": model.pk,
            "runtime": runtime.pk,
            "deployment_mode": "standard",
            # 16k context: the full 131072 of Llama 3.1 does not fit one L4's KV cache (admission refuses it).
            "engine_settings": '{"max_model_len": 16384}',
            "routing_policy": "round_robin",
            "autoscaling": '{"autoscaler": "none"}',
            "pools-TOTAL_FORMS": 1,
            "pools-INITIAL_FORMS": 0,
            "pools-MIN_NUM_FORMS": 1,
            "pools-MAX_NUM_FORMS": 10,
            "pools-0-role": "engine",
            "pools-0-replicas": 1,
            "pools-0-min_replicas": 1,
            "pools-0-max_replicas": 2,
            "pools-0-gpus_per_replica": 1,
            "pools-0-gpu_type": "l4-24gb",
            "pools-0-nodes_per_replica": 1,
        }
        data.update({f"pools-0-{k}": v for k, v in pool.items()})
        return data

    return build


def test_service_added_in_the_admin_is_saved_with_pools_and_audited(browser, service_form):
    response = browser.post(admin_url(InferenceService, "add"), service_form())
    assert response.status_code == 302, response.content.decode()[:2000]
    service = InferenceService.objects.get(name="admin-svc")
    assert service.pools.get().gpu_type == "l4-24gb"
    assert AuditEntry.objects.filter(object_id=str(service.pk), via="admin", action="create").exists()


@pytest.mark.parametrize(
    ("pool", "says"),
    [({"min_replicas": 2}, "min_replicas"), ({"max_replicas": 100}, "GPU quota exceeded")],
)
def test_admin_rejects_an_invalid_spec_and_writes_nothing(browser, service_form, pool, says):
    response = browser.post(admin_url(InferenceService, "add"), service_form(**pool))
    assert response.status_code == 200
    assert says in response.content.decode()
    assert (InferenceService.objects.count(), Pool.objects.count(), AuditEntry.objects.count()) == (0, 0, 0)


def test_admin_delete_marks_the_service_for_deletion(browser, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a)
    browser.post(admin_url(InferenceService, "delete", service.pk), {"post": "yes"})
    service.refresh_from_db()
    assert service.phase == "Deleting"
    assert AuditEntry.objects.filter(object_id=str(service.pk), via="admin", action="delete").exists()


def test_cluster_credentials_are_write_only_in_the_admin(browser):
    cluster = ClusterFactory(
        name="prod", bearer_token="admin-sekret-token", insecure_simulator=False, api_url="https://k8s.example.com"
    )
    page = browser.get(admin_url(Cluster, "change", cluster.pk)).content.decode()
    assert "admin-sekret-token" not in page
    assert "set: leave blank to keep" in page
    # Saving without touching the credential keeps it.
    browser.post(
        admin_url(Cluster, "change", cluster.pk),
        {
            "name": "prod",
            "api_url": "https://k8s.example.com",
            "bearer_token": "",
            "kubeconfig": "",
            "ca_bundle": "",
            "description": "edited",
            "node_model_volume": cluster.node_model_volume,
            "gpu_nodes-TOTAL_FORMS": 0,
            "gpu_nodes-INITIAL_FORMS": 0,
        },
    )
    cluster.refresh_from_db()
    assert (cluster.description, cluster.bearer_token) == ("edited", "admin-sekret-token")
    entry = AuditEntry.objects.get(object_id=str(cluster.pk), via="admin")
    assert "admin-sekret-token" not in str(entry.before) + str(entry.after)


def test_change_page_shows_the_audit_history(browser, api, tenant_a, owner_a):
    service = InferenceServiceFactory(tenant=tenant_a)
    api("owner_a").patch(f"/api/v1/services/{service.pk}/", {"routing_policy": "session"}, format="json")
    page = browser.get(admin_url(InferenceService, "change", service.pk)).content.decode()
    assert "Audit history" in page
    assert "olivia-owner" in page
    assert "routing_policy" in page


def test_service_changed_in_the_admin_bumps_generation_and_is_audited(browser, service_form):
    browser.post(admin_url(InferenceService, "add"), service_form())
    service = InferenceService.objects.get(name="admin-svc")
    pool = service.pools.get()
    data = service_form(replicas=2, id=pool.pk, service=service.pk) | {
        "pools-INITIAL_FORMS": 1,
        "routing_policy": "session",
    }
    response = browser.post(admin_url(InferenceService, "change", service.pk), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    service.refresh_from_db()
    assert (service.routing_policy, service.generation, service.pools.get().replicas) == ("session", 2, 2)
    entry = AuditEntry.objects.get(object_id=str(service.pk), via="admin", action="update")
    assert (entry.before["pools"][0]["replicas"], entry.after["pools"][0]["replicas"]) == (1, 2)


def test_token_added_in_the_admin_shows_its_plaintext_once(browser, owner_a):
    from apps.tenancy.models import ApiToken, hash_token

    response = browser.post(admin_url(ApiToken, "add"), {"user": owner_a.pk, "name": "from-admin"}, follow=True)
    token = ApiToken.objects.get(name="from-admin")
    message = next(str(m) for m in response.context["messages"] if "shown once" in str(m))
    plaintext = message.rsplit(" ", 1)[-1]
    assert token.key_hash == hash_token(plaintext)
    assert plaintext not in browser.get(admin_url(ApiToken, "change", token.pk)).content.decode()
