"""The API resists abuse: requests are throttled per token (per user for sessions, per address for the
anonymous) with 429 and Retry-After; bodies are bounded (413), malformed ones are 400, never 500; and a
long list of ids costs a bounded number of queries."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.serving.models import InferenceService
from tests.factories import AdapterFactory, ClusterFactory, ModelFactory, RuntimeFactory, issue_token


def bearer(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture
def tight(settings):
    settings.API_THROTTLE_RATES = {"user": "3/min", "anon": "2/min"}


def test_a_token_over_its_rate_gets_429_with_retry_after(tight, owner_a, viewer_a):
    _, first = issue_token(owner_a)
    _, second = issue_token(owner_a)
    client = bearer(first)

    answers = [client.get("/api/v1/services/").status_code for _ in range(4)]

    assert answers == [200, 200, 200, 429]
    refused = client.get("/api/v1/services/")
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"].lower()
    # Another token, even of the same user, has its own budget; so has another user.
    assert bearer(second).get("/api/v1/services/").status_code == 200
    assert bearer(issue_token(viewer_a)[1]).get("/api/v1/services/").status_code == 200


def test_a_session_is_throttled_per_user(tight, client, owner_a):
    client.force_login(owner_a)

    answers = [client.get("/api/v1/services/").status_code for _ in range(4)]

    assert answers == [200, 200, 200, 429]


def test_anonymous_requests_are_throttled_per_address(tight, db):
    # The schema is the one thing the anonymous may read (everything else is 401 before any work).
    one, other = APIClient(REMOTE_ADDR="10.9.0.1"), APIClient(REMOTE_ADDR="10.9.0.2")

    answers = [one.get("/api/schema/").status_code for _ in range(3)]

    assert answers == [200, 200, 429]
    assert other.get("/api/schema/").status_code == 200


@pytest.fixture
def catalog(db):
    model = ModelFactory(name="llama-shared")
    return {"cluster": ClusterFactory(name="sim"), "model": model, "runtime": RuntimeFactory(name="vllm-shared")}


def service_body(catalog, **extra) -> dict:
    return {
        "tenant": "alpha", "name": "chat", "cluster": catalog["cluster"].name, "model": catalog["model"].pk,
        "runtime": catalog["runtime"].pk,
        "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpus_per_replica": 1}],
        **extra,
    }


def test_a_body_over_the_limit_is_413_and_changes_nothing(api, owner_a, catalog, settings):
    settings.API_MAX_BODY_BYTES = 64 * 1024
    body = service_body(catalog, description="x" * (65 * 1024))

    response = api("owner_a").post("/api/v1/services/", json.dumps(body), content_type="application/json")

    assert response.status_code == 413
    assert "65536" in response.json()["detail"]
    assert not InferenceService.objects.exists()


def test_a_form_body_over_the_limit_is_413_in_json(api, owner_a, settings):
    settings.API_MAX_BODY_BYTES = 1024
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024

    response = api("owner_a").post("/api/v1/tokens/", {"name": "x" * 4096}, format="multipart")

    assert response.status_code == 413
    assert "1024" in response.json()["detail"]


@pytest.mark.parametrize("body", ["[" * 100_000, '{"a":' * 50_000, "{", "\x00", "1e999999", '"\\ud800"'])
def test_malformed_or_nested_json_is_400(api, owner_a, body):
    response = api("owner_a").post("/api/v1/services/", body, content_type="application/json")

    assert response.status_code == 400


def test_200000_adapter_ids_cost_a_bounded_number_of_queries(api, owner_a, catalog):
    # One real adapter named 200,000 times: looked up one by one, every id would be a query that succeeds.
    adapter = AdapterFactory(base_model=catalog["model"], name="lora")
    client = api("owner_a")
    body = json.dumps(service_body(catalog, adapters=[adapter.pk] * 200_000))

    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/services/", body, content_type="application/json")

    assert response.status_code == 400
    assert "adapters" in response.json()
    assert len(queries) < 20
    assert not InferenceService.objects.exists()


def test_adapter_ids_are_looked_up_together(api, owner_a, catalog):
    adapters = [AdapterFactory(base_model=catalog["model"], name=f"lora-{i}") for i in range(12)]
    client = api("owner_a")

    def queries_for(ids, name) -> int:
        with CaptureQueriesContext(connection) as captured:
            response = client.post("/api/v1/services/", service_body(catalog, name=name, adapters=ids), format="json")
        assert response.status_code == 201, response.content
        return len(captured)

    queries_for([adapters[0].pk], "warm-up")  # the first request also records the token's last use
    assert queries_for([adapters[0].pk], "one") == queries_for([a.pk for a in adapters], "twelve")


@pytest.mark.parametrize("ids, says", [([0], "does not exist"), (["x"], "Incorrect type"), ([None], "null"),
                                       ("7", "list")])
def test_bad_adapter_ids_name_the_field(api, owner_a, catalog, ids, says):
    response = api("owner_a").post("/api/v1/services/", service_body(catalog, adapters=ids), format="json")

    assert response.status_code == 400
    assert says.lower() in str(response.json()["adapters"]).lower()


def test_another_tenants_adapter_is_refused_like_a_missing_one(api, owner_a, tenant_b, catalog):
    theirs = AdapterFactory(tenant=tenant_b, base_model=catalog["model"], name="bravo-lora")

    response = api("owner_a").post("/api/v1/services/", service_body(catalog, adapters=[theirs.pk]), format="json")

    assert response.status_code == 400
    assert "does not exist" in str(response.json()["adapters"])
