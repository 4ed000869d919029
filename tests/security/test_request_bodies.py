"""No body makes the API answer 500: deep nesting under the parser's own limit, bodies over the size limit
(413 in JSON, whatever Content-Length says), and unknown `ordering` fields (400 naming the parameter)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.factories import issue_token

# The body from the security review: 400 levels is under the JSON parser's limit, over the serializer's
# old recursive walk.
DEEP = '{"tenant":"alpha","name":' + "[" * 400 + "]" * 400 + "}"


@pytest.mark.parametrize("actor", ["owner_a", "viewer_a"])
@pytest.mark.parametrize("path", ["/api/v1/tokens/", "/api/v1/services/"])
def test_a_deeply_nested_body_is_a_400_naming_the_field(api, actor, path):
    response = api(actor).post(path, DEEP, content_type="application/json")

    assert response.status_code in (400, 403), response.content
    if response.status_code == 400:
        assert "name" in response.json()


def test_a_deeply_nested_patch_is_a_400(api, owner_a):
    token, _ = issue_token(owner_a, name="patched")

    response = api("owner_a").patch(f"/api/v1/tokens/{token.pk}/", DEEP, content_type="application/json")

    assert response.status_code == 400, response.content
    assert "name" in response.json()


def test_a_body_over_the_limit_with_content_length_is_413_in_json(owner_a, settings):
    # Both limits as deployed: Django's own form limit equals API_MAX_BODY_BYTES.
    settings.API_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    _, plaintext = issue_token(owner_a)
    body = json.dumps({"name": "x" * (65 * 1024)})

    response = Client().post("/api/v1/tokens/", body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {plaintext}")

    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert "65536" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/api/v1/tokens/", "/api/v1/services/", "/api/v1/models/"])
@pytest.mark.parametrize("ordering", ["password", "-secret_hash", "name,nonsense"])
def test_an_unknown_ordering_field_is_a_400_naming_the_parameter(api, owner_a, path, ordering):
    response = api("owner_a").get(path, {"ordering": ordering})

    assert response.status_code == 400
    assert "ordering" in response.json()


def test_a_known_ordering_field_still_orders(api, owner_a):
    response = api("owner_a").get("/api/v1/models/", {"ordering": "-name"})

    assert response.status_code == 200
