"""Query parameter values that do not parse answer 400 with the parameter and the reason, never 500.

Every list endpoint is tried with the values that used to crash somewhere (a NUL byte, which
PostgreSQL refuses in text; digits outside ASCII, which `str.isdigit()` accepts but `int()` does not;
numbers too large for a timedelta or a bigint), and the metrics endpoint with each of its own
parameters.
"""

from __future__ import annotations

import pytest

from tests.factories import InferenceServiceFactory

LISTS = ("tenants", "memberships", "tokens", "models", "adapters", "runtimes", "clusters", "gpu-nodes", "services",
         "audit-entries")
GENERIC = ("search", "ordering", "page", "page_size")
BAD_VALUES = ("\x00", "a\x00b", "²", "9" * 40)


@pytest.mark.parametrize("resource", LISTS)
@pytest.mark.parametrize("param", GENERIC)
@pytest.mark.parametrize("value", BAD_VALUES)
def test_generic_list_parameters_never_crash(api, tenant_a, resource, param, value):
    response = api("staff").get(f"/api/v1/{resource}/", {param: value})

    # A page that does not exist is DRF's 404; anything else unreadable is a 400; never a 500.
    assert response.status_code in (200, 400, 404), response.content
    if response.status_code == 400:
        assert param in response.content.decode()


@pytest.mark.parametrize("resource, param", [
    ("services", "tenant"), ("services", "model"), ("services", "phase"), ("services", "cluster"),
    ("tokens", "revoked"), ("models", "platform_wide"), ("memberships", "user"), ("audit-entries", "object_id"),
])
@pytest.mark.parametrize("value", BAD_VALUES)
def test_filter_values_never_crash(api, tenant_a, resource, param, value):
    response = api("staff").get(f"/api/v1/{resource}/", {param: value})

    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert param in response.json()


@pytest.mark.parametrize("params, named", [
    ({"since": "99999999999d"}, "since"),
    ({"until": "99999999999d"}, "until"),
    ({"since": "²"}, "since"),
    ({"since": "1²m"}, "since"),
    ({"step": "1e20"}, "step"),
    ({"step": "9" * 40}, "step"),
    ({"step": "99999999999d"}, "step"),
    ({"step": "²"}, "step"),
    ({"since": "\x00"}, "since"),
    ({"since": "0001-01-01T00:00:00"}, "since"),
    ({"until": "9999-12-31T23:59:59-14:00"}, "until"),
    ({"role": "\x00"}, "role"),
    ({"role": "no-such-pool"}, "role"),
])
def test_metrics_parameters_that_do_not_parse_are_400(api, tenant_a, params, named):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")

    response = api("viewer_a").get(f"/api/v1/services/{service.pk}/metrics/", params)

    assert response.status_code == 400, response.content
    assert named in response.json()["detail"]


@pytest.mark.parametrize("path", [
    "/api/v1/services/{huge}/", "/api/v1/services/{huge}/metrics/", "/api/v1/services/{huge}/manifests/",
    "/api/v1/tokens/{huge}/", "/api/v1/models/{huge}/", "/api/v1/audit-entries/{huge}/",
])
def test_ids_beyond_bigint_are_404(api, tenant_a, path):
    response = api("staff").get(path.format(huge="9" * 40))

    assert response.status_code == 404, response.content


@pytest.mark.parametrize("params", [{"role": "\x00"}, {"since": "99999999999d"}, {"step": "²"}, {"range": "\x00"}])
def test_service_page_series_answers_400_or_200_never_500(client, viewer_a, tenant_a, params):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    client.force_login(viewer_a)

    response = client.get(f"/services/{service.pk}/series/", params)

    assert response.status_code in (200, 400)
    if "range" not in params:
        assert response.status_code == 400


@pytest.mark.parametrize("resource, param, value", [
    ("services", "page_size", "null"), ("services", "page_size", "²"), ("services", "page_size", "-3"),
    ("tokens", "revoked", "null"), ("tokens", "revoked", "maybe"), ("models", "platform_wide", "yes please"),
])
def test_values_of_the_wrong_type_are_400_not_ignored(api, tenant_a, resource, param, value):
    response = api("staff").get(f"/api/v1/{resource}/", {param: value})

    assert response.status_code == 400, response.content
    assert param in response.json()


@pytest.mark.parametrize("path", ["/api/v1/services/0.5/", "/api/v1/tokens/0.5/", "/api/v1/nothing-here/"])
def test_unknown_api_paths_are_json_404(api, path):
    response = api("staff").get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "detail" in response.json()


@pytest.mark.parametrize("field, value", [
    ("engine_settings", {"extra_args": ["--x\x00"]}), ("engine_settings", {"a\x00": 1}), ("routing_policy", "a\x00"),
])
def test_nul_characters_in_a_body_are_400_naming_the_field(api, tenant_a, owner_a, field, value):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")

    response = api("owner_a").patch(f"/api/v1/services/{service.pk}/", {field: value}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()


def test_nul_characters_in_a_text_field_are_400(api, tenant_a, owner_a):
    response = api("owner_a").patch(f"/api/v1/tenants/{tenant_a.pk}/", {"description": "a\x00b"}, format="json")

    assert response.status_code == 400
    assert "description" in response.json()


@pytest.mark.parametrize("value", ["0.99", "2", "yes"])
def test_boolean_filters_of_model_fields_refuse_other_values(api, staff, value):
    response = api("staff").get("/api/v1/clusters/", {"has_gateway": value})

    assert response.status_code == 400
    assert "has_gateway" in response.json()


@pytest.mark.parametrize("fmt", ["json", "multipart"])
def test_nul_characters_in_a_related_slug_are_400(api, tenant_a, owner_a, fmt):
    response = api("owner_a").post("/api/v1/services/", {"tenant": "alp\x00ha", "name": "x"}, format=fmt)

    assert response.status_code == 400
    assert "tenant" in response.json()
