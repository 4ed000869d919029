"""Hypothesis sends deeply nested JSON, and bodies around the size limit, at every write operation the
schema lists, as staff and as a tenant owner: no answer is a server error. Nesting up to 950 levels stays
under the JSON parser's own limit, where any recursive walk of request data would overflow Python's stack."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from tests.api.test_schemathesis import OPERATIONS, fuzz_world  # noqa: F401 (fixture)

WRITES = [op for op in OPERATIONS if op.method.upper() in ("POST", "PUT", "PATCH")]
LIMIT = 16 * 1024
EXAMPLES = settings(max_examples=4, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def nested(depth: int, kind: str) -> str:
    """JSON text `depth` levels deep: lists, objects, or both in turn."""
    opens = {"list": "[" * depth, "dict": '{"a":' * depth, "mixed": '[{"a":' * (depth // 2)}[kind]
    closes = {"list": "]" * depth, "dict": "}" * depth, "mixed": "}]" * (depth // 2)}[kind]
    return opens + "0" + closes if kind != "list" else opens + closes


def fields_of(document: dict, operation) -> list[str]:
    """The request body's top-level properties, as the schema document names them."""
    definition = document["paths"][operation.path][operation.method.lower()]
    body = (definition.get("requestBody") or {}).get("content", {}).get("application/json", {})
    ref = (body.get("schema") or {}).get("$ref", "")
    schema = document["components"]["schemas"].get(ref.rsplit("/", 1)[-1], {}) if ref else {}
    return sorted(schema.get("properties", {})) or ["name"]


def concrete_path(client: APIClient, path: str) -> str:
    """The operation's path with `{id}` replaced by an object the client can see (or 1 when there is none)."""
    if "{id}" not in path:
        return path
    listing = client.get(path.split("{id}")[0])
    results = listing.json().get("results", []) if listing.status_code == 200 else []
    return path.replace("{id}", str(results[0]["id"]) if results else "1")


def send_nested(client: APIClient, document: dict, operation) -> None:
    fields = fields_of(document, operation)
    path = concrete_path(client, operation.path)
    method = getattr(client, operation.method.lower())

    @EXAMPLES
    @given(field=st.sampled_from(fields), depth=st.integers(1, 950),
           kind=st.sampled_from(["list", "dict", "mixed"]))
    def run(field, depth, kind):
        body = "{" + json.dumps(field) + ":" + nested(depth, kind) + "}"
        response = method(path, body, content_type="application/json")
        assert response.status_code < 500, (operation.method, path, field, depth, kind, response.content[:200])

    @EXAMPLES
    @given(size=st.integers(LIMIT - 64, LIMIT + 64))
    def large(size):
        body = json.dumps({fields[0]: "x" * max(size - 20, 0)})
        response = method(path, body, content_type="application/json")
        assert response.status_code < 500, (operation.method, path, size)
        if len(body.encode()) > LIMIT and response.status_code not in (403, 404, 405):  # refused before reading
            assert response.status_code == 413 and response["Content-Type"].startswith("application/json")

    run()
    large()


@pytest.mark.parametrize("actor", ["staff", "owner_a"])
def test_no_write_endpoint_answers_500_to_nested_or_large_bodies(fuzz_world, settings, actor):  # noqa: F811
    settings.API_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {fuzz_world[actor]}")
    assert len(WRITES) >= 15
    document = client.get("/api/schema/", {"format": "json"}).json()
    failures = []
    for operation in WRITES:
        try:
            send_nested(client, document, operation)
        except (Exception, BaseExceptionGroup) as exc:  # report every operation's failure together
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)
