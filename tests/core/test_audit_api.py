"""The audit log through the API: members read their tenants' history, nobody else's."""

from __future__ import annotations

from tests.factories import InferenceServiceFactory


def test_members_see_their_tenants_entries_only(api, tenant_a, tenant_b, owner_a, member_b):
    a_service = InferenceServiceFactory(tenant=tenant_a, name="alpha-svc")
    b_service = InferenceServiceFactory(tenant=tenant_b, name="bravo-svc")
    api("owner_a").patch(f"/api/v1/services/{a_service.pk}/", {"routing_policy": "session"}, format="json")
    api("member_b").patch(f"/api/v1/services/{b_service.pk}/", {"routing_policy": "session"}, format="json")
    a_rows = api("owner_a").get("/api/v1/audit-entries/?object_type=inferenceservice").json()["results"]
    b_rows = api("member_b").get("/api/v1/audit-entries/").json()["results"]
    assert [r["object_repr"] for r in a_rows] == ["alpha/alpha-svc"]
    assert [r["object_repr"] for r in b_rows] == ["bravo/bravo-svc"]
    assert a_rows[0]["before"]["routing_policy"] == "round_robin"
    assert a_rows[0]["after"]["routing_policy"] == "session"


def test_the_audit_log_cannot_be_written(api, staff):
    assert api("staff").post("/api/v1/audit-entries/", {}, format="json").status_code == 405
