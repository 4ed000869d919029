"""The OpenAPI schema: generated without a single drf-spectacular warning, valid, and served."""

from __future__ import annotations

from io import StringIO

import yaml
from django.core.management import call_command


def test_schema_has_no_warnings_and_validates(db):
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = yaml.safe_load(out.getvalue())
    assert "/api/v1/services/{id}/scale/" in schema["paths"]
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}


def test_schema_and_docs_are_served(api, staff):
    assert api("staff").get("/api/schema/").status_code == 200
    assert api("staff").get("/api/docs/").status_code == 200


def test_the_audit_entry_tenant_is_documented_as_nullable(api, staff):
    # Platform-wide objects (a shared model, a cluster) have audit entries without a tenant.
    from tests.factories import ModelFactory

    model = ModelFactory(name="shared")
    api("staff").delete(f"/api/v1/models/{model.pk}/")
    entry = api("staff").get("/api/v1/audit-entries/", {"object_type": "model"}).json()["results"][0]
    schema = api("staff").get("/api/schema/", HTTP_ACCEPT="application/json").json()

    assert entry["tenant"] is None
    assert schema["components"]["schemas"]["AuditEntry"]["properties"]["tenant"].get("nullable") is True
