"""Keyset (cursor) pages of the service list: complete, in order, scoped, constant cost at any depth;
page-number pages keep working alongside."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory


@pytest.fixture
def services(tenant_a, tenant_b):
    cluster, model, runtime = ClusterFactory(), ModelFactory(), RuntimeFactory()
    made = []
    # 7 in alpha and 5 in bravo; names chosen so that name order differs from creation order.
    for tenant, count in ((tenant_a, 7), (tenant_b, 5)):
        for i in range(count):
            made.append(InferenceServiceFactory(tenant=tenant, name=f"svc-{(i * 3) % count}-{i}", cluster=cluster,
                                                model=model, runtime=runtime))
    return made


def walk(client, query: str) -> tuple[list[str], list[int]]:
    """Follow `next` from an empty cursor; the names seen and the queries each page took."""
    url, names, queries = f"/api/v1/services/?cursor=&{query}", [], []
    while url:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        assert "count" not in body and body["previous"] is None
        names += [s["name"] for s in body["results"]]
        queries.append(len(ctx.captured_queries))
        url = body["next"]
    return names, queries


def test_cursor_pages_cover_the_list_once_in_tenant_then_name_order(api, services, staff):
    client = api("staff")
    client.get("/api/v1/services/?page_size=1")  # warm per-process caches (content types)
    names, queries = walk(client, "page_size=5")
    expected = [s.name for s in sorted(services, key=lambda s: (s.tenant_id, s.name))]
    assert names == expected
    assert len(queries) == 3  # 12 services in pages of 5
    assert len(set(queries)) == 1  # the last page costs what the first does


def test_cursor_pages_follow_a_requested_ordering(api, services, staff):
    names, _ = walk(api("staff"), "page_size=4&ordering=-name")
    assert names == sorted((s.name for s in services), reverse=True)


def test_cursor_pages_are_scoped_to_the_member_tenant(api, services, owner_a):
    names, _ = walk(api("owner_a"), "page_size=3")
    assert names == sorted(s.name for s in services if s.tenant.slug == "alpha")


def test_page_numbers_still_work_with_a_count(api, services, staff):
    body = api("staff").get("/api/v1/services/?page_size=5&page=3").json()
    assert body["count"] == 12
    assert len(body["results"]) == 2
    assert body["next"] is None


def test_a_cursor_made_for_another_ordering_is_refused(api, services, staff):
    client = api("staff")
    next_url = client.get("/api/v1/services/?cursor=&page_size=2").json()["next"]
    cursor = next_url.split("cursor=")[1].split("&")[0]
    response = client.get(f"/api/v1/services/?cursor={cursor}&page_size=2&ordering=name")
    assert response.status_code == 400
    assert "another ordering" in str(response.json()["cursor"])


def test_a_garbled_cursor_is_400(api, services, staff):
    response = api("staff").get("/api/v1/services/?cursor=not-a-cursor")
    assert response.status_code == 400
    assert "cursor" in response.json()


def test_a_forged_cursor_out_of_the_columns_range_is_400(api, services, staff):
    import base64
    import json

    raw = json.dumps({"o": ["tenant_id", "name", "pk"], "p": [10**30, "x", 1]}).encode()
    response = api("staff").get(f"/api/v1/services/?cursor={base64.urlsafe_b64encode(raw).decode()}")
    assert response.status_code == 400
    assert "cursor" in response.json()
