"""Ids in a query string are ASCII digits: `int()` reads Arabic-Indic digits (`"١"` is 1), so without the check
`?model=١` would filter by object 1 and `?page=٢` would be page 2."""

from __future__ import annotations

import pytest

from tests.factories import AdapterFactory, InferenceServiceFactory

ARABIC_INDIC = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")


@pytest.mark.parametrize(("resource", "param", "field"), [
    ("services", "model", "model_id"), ("services", "runtime", "runtime_id"), ("adapters", "base_model", "model_id")])
def test_a_related_id_in_other_digits_is_a_400_naming_the_filter(api, tenant_a, resource, param, field):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    AdapterFactory(base_model=service.model, name="chat")
    pk = str(getattr(service, field))
    client = api("staff")
    assert [s["name"] for s in client.get(f"/api/v1/{resource}/", {param: pk}).json()["results"]] == ["chat"]

    response = client.get(f"/api/v1/{resource}/", {param: pk.translate(ARABIC_INDIC)})

    assert response.status_code == 400, response.content
    assert response.json()[param] == ["Write the id in digits 0-9."]


def test_a_page_number_in_other_digits_is_not_a_page(api, tenant_a):
    for name in ("a", "b"):
        InferenceServiceFactory(tenant=tenant_a, name=name)
    client = api("staff")
    assert client.get("/api/v1/services/", {"page": "2", "page_size": "1"}).status_code == 200

    response = client.get("/api/v1/services/", {"page": "\u0662", "page_size": "1"})

    assert response.status_code == 404
    assert response.json()["detail"] == "Invalid page: write the page number in digits 0-9."
