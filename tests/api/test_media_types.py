"""A body in a media type the API does not read is a 415 with the JSON error body, and the schema says so for
every operation that takes a body (schemathesis found the 415 undocumented on the trace upload)."""

from __future__ import annotations

from drf_spectacular.generators import SchemaGenerator


def test_a_body_the_api_cannot_read_is_a_documented_415(api, owner_a, tenant_a):
    response = api("owner_a").post("/api/v1/whatif-traces/", data="TIMESTAMP,ContextTokens,GeneratedTokens\n",
                                   content_type="text/csv")

    assert response.status_code == 415
    assert "text/csv" in response.json()["detail"]
    schema = SchemaGenerator().get_schema(request=None, public=True)
    upload = schema["paths"]["/api/v1/whatif-traces/"]["post"]
    assert "415" in upload["responses"]
    assert "415" not in schema["paths"]["/api/v1/whatif-traces/"]["get"]["responses"]  # no body, no 415
