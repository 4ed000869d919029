"""Services through the API: optimistic concurrency, generations, scaling, deletion, query counts."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.models import AuditEntry
from tests.factories import AdapterFactory, ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory


@pytest.fixture
def service(tenant_a, owner_a):
    return InferenceServiceFactory(
        tenant=tenant_a, name="chat", cluster=ClusterFactory(name="sim"), model=ModelFactory(), runtime=RuntimeFactory()
    )


def url(service, suffix=""):
    return f"/api/v1/services/{service.pk}/{suffix}"


def test_get_returns_an_etag_of_the_version(api, service):
    response = api("owner_a").get(url(service))
    assert response["ETag"] == '"1"'


def test_write_with_current_if_match_succeeds_and_moves_the_etag(api, service):
    response = api("owner_a").patch(url(service), {"routing_policy": "session"}, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 200
    assert response["ETag"] == '"2"'


def test_stale_if_match_is_412_and_changes_nothing(api, service):
    client = api("owner_a")
    client.patch(url(service), {"routing_policy": "session"}, format="json")
    response = client.patch(url(service), {"routing_policy": "kv_aware"}, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 412
    service.refresh_from_db()
    assert service.routing_policy == "session"


def test_stale_version_in_the_body_is_409(api, service):
    client = api("owner_a")
    client.patch(url(service), {"routing_policy": "session"}, format="json")
    response = client.patch(url(service), {"routing_policy": "kv_aware", "version": 1}, format="json")
    assert response.status_code == 409
    service.refresh_from_db()
    assert service.routing_policy == "session"


def test_stale_scale_is_412(api, service):
    client = api("owner_a")
    client.patch(url(service), {"routing_policy": "session"}, format="json")
    response = client.post(
        url(service, "scale/"), {"pool": "engine", "replicas": 2}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 412
    assert service.pools.get().replicas == 1


def test_spec_change_bumps_generation_but_a_no_op_does_not(api, service):
    client = api("owner_a")
    assert client.patch(url(service), {"routing_policy": "round_robin"}, format="json").json()["generation"] == 1
    body = client.patch(url(service), {"routing_policy": "session"}, format="json").json()
    assert (body["generation"], body["version"]) == (2, 3)


def test_scale_sets_replicas_bumps_generation_and_is_audited(api, service):
    response = api("operator_a").post(url(service, "scale/"), {"pool": "engine", "replicas": 3}, format="json")
    assert response.status_code == 200
    assert response.json()["pools"][0]["replicas"] == 3
    assert response.json()["generation"] == 2
    entry = AuditEntry.objects.get(object_id=str(service.pk), action="update")
    assert (entry.before["pools"][0]["replicas"], entry.after["pools"][0]["replicas"]) == (1, 3)
    assert entry.actor.username == "oscar-operator"


def test_scale_beyond_max_is_400_naming_replicas(api, service):
    response = api("owner_a").post(url(service, "scale/"), {"pool": "engine", "replicas": 5}, format="json")
    assert response.status_code == 400
    assert "max_replicas 4" in str(response.json()["replicas"])
    assert service.pools.get().replicas == 1


def test_scale_of_a_missing_pool_is_400(api, service):
    response = api("owner_a").post(url(service, "scale/"), {"pool": "decode", "replicas": 1}, format="json")
    assert response.status_code == 400
    assert "pool" in response.json()


def test_a_deleting_service_refuses_changes_and_repeat_deletes_are_accepted(api, service):
    client = api("owner_a")
    assert client.delete(url(service)).status_code == 202
    assert client.delete(url(service)).status_code == 202
    assert client.patch(url(service), {"routing_policy": "session"}, format="json").status_code == 409
    assert AuditEntry.objects.filter(object_id=str(service.pk), action="delete").count() == 1


def test_tenant_of_a_service_cannot_change(api, service, tenant_b, staff):
    response = api("staff").patch(url(service), {"tenant": "bravo"}, format="json")
    assert response.status_code == 400
    assert "tenant" in response.json()


def list_queries(client, page_size: int) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(f"/api/v1/services/?page_size={page_size}")
    assert response.status_code == 200
    assert len(response.json()["results"]) == page_size
    return len(ctx.captured_queries)


@pytest.mark.parametrize("actor", ["staff", "owner_a"])
def test_list_queries_do_not_grow_with_page_size(api, tenant_a, owner_a, staff, actor):
    cluster, model, runtime = ClusterFactory(), ModelFactory(), RuntimeFactory()
    lora = AdapterFactory(base_model=model)
    for i in range(30):
        service = InferenceServiceFactory(
            tenant=tenant_a, name=f"svc-{i}", cluster=cluster, model=model, runtime=runtime
        )
        service.adapters.add(lora)
    client = api(actor)
    client.get("/api/v1/services/?page_size=1")  # warm per-process caches (content types)
    assert list_queries(client, 3) == list_queries(client, 30)


def test_a_spec_update_keeps_status_the_reconciler_wrote_meanwhile(service, owner_a):
    from apps.serving.actions import save_service
    from apps.serving.rendering.spec import PoolSpec

    loaded = type(service).objects.get(pk=service.pk)  # a client loads the service...
    # ...the reconciler reports while the client is editing...
    type(service).objects.filter(pk=service.pk).update(phase="Ready", observed_generation=1, endpoint="http://x")
    loaded.routing_policy = "session"  # ...and the client saves its (stale-status) copy.
    save_service(loaded, pools=[PoolSpec("engine", max_replicas=4)], adapters=[], actor=owner_a, via="api")
    service.refresh_from_db()
    assert (service.phase, service.observed_generation, service.endpoint) == ("Ready", 1, "http://x")
    assert (service.routing_policy, service.generation) == ("session", 2)


def test_services_filter_by_tenant_engine_phase_and_search(api, tenant_a, tenant_b, staff):
    cluster, model = ClusterFactory(), ModelFactory()
    vllm, sglang = RuntimeFactory(), RuntimeFactory(engine="sglang", image="lmsysorg/sglang")
    InferenceServiceFactory(tenant=tenant_a, name="chat-a", cluster=cluster, model=model, runtime=vllm)
    InferenceServiceFactory(tenant=tenant_a, name="code-a", cluster=cluster, model=model, runtime=sglang)
    ready = InferenceServiceFactory(tenant=tenant_b, name="chat-b", cluster=cluster, model=model, runtime=sglang)
    type(ready).objects.filter(pk=ready.pk).update(phase="Ready")
    client = api("staff")

    def names(query):
        return sorted(s["name"] for s in client.get(f"/api/v1/services/?{query}").json()["results"])

    assert names("tenant=alpha") == ["chat-a", "code-a"]
    assert names("engine=sglang") == ["chat-b", "code-a"]
    assert names("phase=Ready") == ["chat-b"]
    assert names("search=chat") == ["chat-a", "chat-b"]
    assert names("ordering=-name&page_size=1") == ["code-a"]
