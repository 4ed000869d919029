"""The tenant-isolation matrix: every actor against every action on tenant A's services, tokens and
private catalog entries, as JSON and as the browsable API's HTML. Another tenant's object is a 404
(never a 403), viewers read only, and nothing tenant B receives mentions tenant A's names, other
tenants' users or a cluster B has no service on."""

from __future__ import annotations

import pytest

from apps.serving.models import InferenceService
from apps.tenancy.models import ApiToken
from tests.conftest import ACTORS
from tests.factories import (
    AdapterFactory,
    ClusterFactory,
    InferenceServiceFactory,
    ModelFactory,
    RuntimeFactory,
    issue_token,
)

A_SERVICE = "alpha-payroll-llm"
A_TOKEN = "alpha-deploy-bot"
A_MODEL = "alpha-private-model"
A_RUNTIME = "alpha-private-runtime"
A_ADAPTER = "alpha-private-lora"
HIDDEN_CLUSTER = "hidden-gpu-cluster"
A_NAMES = ("alpha", A_SERVICE, A_TOKEN, A_MODEL, A_RUNTIME, A_ADAPTER, "olivia-owner", "vera-viewer", HIDDEN_CLUSTER)
CATALOG = ("models", "runtimes", "adapters")

OK_WRITER = {"list": 200, "get": 200, "create": 201, "update": 200, "delete": None, "scale": 200}
VIEWER = {"list": 200, "get": 200, "create": 403, "update": 403, "delete": 403, "scale": 403}
# Creating in tenant A is refused because B cannot even name A (the tenant field rejects "alpha").
OUTSIDER = {"list": 200, "get": 404, "create": 400, "update": 404, "delete": 404, "scale": 404}
UNAUTHENTICATED = dict.fromkeys(OK_WRITER, 401)


def expected(resource: str, actor: str, action: str) -> int:
    table = {
        "owner_a": OK_WRITER,
        "operator_a": OK_WRITER,
        "staff": OK_WRITER,
        "viewer_a": VIEWER,
        "member_b": OUTSIDER,
    }.get(actor, UNAUTHENTICATED)
    status = table[action]
    if action == "delete" and status is None:
        # Services are marked for deletion (the reconciler removes them); other resources go at once.
        status = 202 if resource == "services" else 204
    if resource == "tokens" and action == "create" and actor == "viewer_a":
        status = 201  # a viewer may mint a token for themselves: it carries only their own role
    if resource == "tokens" and action in ("update", "delete") and actor == "operator_a":
        status = 403  # A's token belongs to its owner: only they, a tenant owner or staff change it
    if resource == "tokens" and action == "create" and actor == "staff":
        status = 400  # staff are not members of A, so they cannot bind a token to it
    return status


@pytest.fixture
def world(tenant_a, tenant_b, owner_a, operator_a, viewer_a, member_b, staff):
    cluster = ClusterFactory(name="sim")
    ClusterFactory(name=HIDDEN_CLUSTER)
    model = ModelFactory(name="llama-shared")
    runtime = RuntimeFactory(name="vllm-shared")
    service = InferenceServiceFactory(tenant=tenant_a, name=A_SERVICE, cluster=cluster, model=model, runtime=runtime)
    InferenceServiceFactory(tenant=tenant_b, name="bravo-chat", cluster=cluster, model=model, runtime=runtime)
    token, _ = issue_token(owner_a, tenant_a, name=A_TOKEN)
    private_model = ModelFactory(tenant=tenant_a, name=A_MODEL)
    return {
        "services": service,
        "tokens": token,
        "models": private_model,
        "runtimes": RuntimeFactory(tenant=tenant_a, name=A_RUNTIME),
        "adapters": AdapterFactory(tenant=tenant_a, name=A_ADAPTER, base_model=model),
        "cluster": cluster,
        "model": model,
        "runtime": runtime,
    }


def request_for(resource: str, action: str, world: dict) -> tuple[str, str, dict | None]:
    obj = world[resource]
    base = f"/api/v1/{resource}/"
    detail = f"{base}{obj.pk}/"
    create = {
        "services": {
            "tenant": "alpha",
            "name": "alpha-new",
            "cluster": world["cluster"].name,
            "model": world["model"].pk,
            "runtime": world["runtime"].pk,
            "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpus_per_replica": 1}],
        },
        "tokens": {"name": "alpha-new-token", "tenant": "alpha"},
        "models": {
            "tenant": "alpha",
            "name": "alpha-new-model",
            "source_uri": "hf://Qwen/Qwen2.5-7B-Instruct",
            "parameters_billions": 7.62,
            "layers": 28,
            "hidden_size": 3584,
            "attention_heads": 28,
            "kv_heads": 4,
            "head_dim": 128,
            "max_context": 32768,
        },
        "runtimes": {
            "tenant": "alpha",
            "name": "alpha-new-runtime",
            "engine": "sglang",
            "image": "lmsysorg/sglang",
            "tag": "v0.5.23",
            "supported_modes": ["standard"],
        },
        "adapters": {
            "tenant": "alpha",
            "name": "alpha-new-lora",
            "base_model": world["model"].pk,
            "source_uri": "s3://adapters/new",
            "rank": 8,
        },
    }[resource]
    update = {
        "services": {"routing_policy": "session"},
        "tokens": {"name": "renamed"},
        "models": {"license": "apache-2.0"},
        "runtimes": {"tag": "v0.5.24"},
        "adapters": {"rank": 32},
    }[resource]
    return {
        "list": ("get", base, None),
        "get": ("get", detail, None),
        "create": ("post", base, create),
        "update": ("patch", detail, update),
        "delete": ("delete", detail, None),
        "scale": ("post", f"{detail}scale/", {"pool": "engine", "replicas": 2}),
    }[action]


CELLS = [
    (resource, actor, action)
    for resource in ("services", "tokens", *CATALOG)
    for actor in ACTORS
    for action in ("list", "get", "create", "update", "delete", "scale")
    if action != "scale" or resource == "services"
]


@pytest.mark.parametrize("accept", ["application/json", "text/html"])
@pytest.mark.parametrize(("resource", "actor", "action"), CELLS)
def test_isolation_matrix(api, world, resource, actor, action, accept):
    client = api(actor)
    method, url, payload = request_for(resource, action, world)
    response = getattr(client, method)(url, payload, format="json", HTTP_ACCEPT=accept)
    status = expected(resource, actor, action)
    if status == 204 and accept == "text/html":
        status = 200  # the browsable API answers a deletion with a page
    assert response.status_code == status, response.content
    assert response.status_code == 204 or response["Content-Type"].startswith(accept)
    if actor == "member_b":
        body = response.content.decode().lower()
        # Names B typed itself may be echoed back ("alpha does not exist"); nothing else of A may appear.
        sent = str(payload).lower()
        for name in (n for n in A_NAMES if n not in sent):
            assert name not in body, f"tenant B saw {name!r}"


BROWSABLE = ("services", "tokens", "memberships", "tenants", "audit-entries", *CATALOG)


@pytest.mark.parametrize("resource", BROWSABLE)
def test_browsable_api_pages_and_forms_show_tenant_b_nothing_of_others(api, world, resource):
    # B's own objects' pages too: their forms are where related-field choices (users, clusters) appear.
    own = {"services": "bravo-chat", "tenants": "bravo"}
    client = api("member_b")
    pages = [f"/api/v1/{resource}/"]
    listed = client.get(f"/api/v1/{resource}/").json()["results"]
    pages += [f"/api/v1/{resource}/{row['id']}/" for row in listed[:3]]

    for page in pages:
        response = client.get(page, HTTP_ACCEPT="text/html")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/html")
        body = response.content.decode().lower()
        for name in A_NAMES:
            assert name not in body, f"tenant B saw {name!r} on {page}"
    if resource in own:
        assert own[resource] in client.get(f"/api/v1/{resource}/", HTTP_ACCEPT="text/html").content.decode()


def test_staff_keep_the_browsable_forms(api, world):
    # The counterpart: staff may see every user and cluster, so their forms still offer them.
    body = api("staff").get("/api/v1/memberships/", HTTP_ACCEPT="text/html").content.decode()
    assert "<form" in body and "olivia-owner" in body and "boris-bravo" in body
    body = api("staff").get("/api/v1/services/", HTTP_ACCEPT="text/html").content.decode()
    assert HIDDEN_CLUSTER in body


@pytest.mark.parametrize("resource", ["services", "tokens", *CATALOG])
def test_list_shows_tenant_a_names_to_its_viewer(api, world, resource):
    # The counterpart of the matrix's "B never sees A": the same list does show A's names to A.
    body = api("viewer_a").get(f"/api/v1/{resource}/").content.decode()
    names = {"services": A_SERVICE, "tokens": A_TOKEN, "models": A_MODEL, "runtimes": A_RUNTIME, "adapters": A_ADAPTER}
    assert names[resource] in body


def test_viewers_refused_writes_change_nothing(api, world):
    service = world["services"]
    client = api("viewer_a")
    client.patch(f"/api/v1/services/{service.pk}/", {"routing_policy": "session"}, format="json")
    client.post(f"/api/v1/services/{service.pk}/scale/", {"pool": "engine", "replicas": 3}, format="json")
    client.delete(f"/api/v1/tokens/{world['tokens'].pk}/")
    service.refresh_from_db()
    assert service.routing_policy == "round_robin"
    assert service.pools.get().replicas == 1
    assert ApiToken.objects.filter(pk=world["tokens"].pk).exists()
    assert not InferenceService.objects.filter(deletion_requested_at__isnull=False).exists()


def test_member_of_b_lists_only_b_services(api, world):
    names = [s["name"] for s in api("member_b").get("/api/v1/services/").json()["results"]]
    assert names == ["bravo-chat"]


def test_tenant_bound_token_limits_staff_to_that_tenant(world, tenant_b, staff):
    from rest_framework.test import APIClient

    from apps.tenancy.models import Membership

    Membership.objects.create(user=staff, tenant=tenant_b, role="viewer")
    _, plaintext = issue_token(staff, tenant_b)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    names = [s["name"] for s in client.get("/api/v1/services/").json()["results"]]
    assert names == ["bravo-chat"]
    assert client.get("/api/v1/clusters/").status_code == 403
    assert client.get(f"/api/v1/services/{world['services'].pk}/").status_code == 404
