"""OpenAPI post-processing: the error answers every operation can give, documented once.

drf-spectacular documents the success responses; clients (and schemathesis) also need to know that any
operation may answer 400/401/403/404/429, writes 409/413, operations with a body 415, and conditional writes
412, all with the same JSON error body. Optional query parameters are marked `allowEmptyValue`: the API reads
`?name=` as not given.
"""

from __future__ import annotations

ERROR_SCHEMA = {
    "type": "object",
    "description": 'An error: `{"detail": "..."}`, or field name → list of messages for invalid input.',
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": True,
}
COMMON = {
    "400": "Invalid input or a query parameter that does not parse; the body names the field and the reason.",
    "401": "No credentials, or an unknown, expired or revoked token.",
    "403": "Authenticated, but the role does not allow this.",
    "404": "No such object, or one the caller may not see; also a page past the end of a list.",
    "429": "Too many requests for this token, user or client; see Retry-After.",
}
WRITES = {
    "409": "A name clash, a stale version, or a state that does not allow the change.",
    "413": "The request body is larger than API_MAX_BODY_BYTES.",
}
MEDIA_TYPE = {"415": "The body's Content-Type is none that the operation reads (JSON, form or multipart)."}
PRECONDITION = {"412": "If-Match does not match the object's current ETag."}


def _response(description: str) -> dict:
    schema = {"$ref": "#/components/schemas/Error"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def add_error_responses(result, generator, request, public):
    """SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] entry: add the error responses to every operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path in result.get("paths", {}).values():
        for method, operation in path.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            codes = dict(COMMON)
            if method != "get":
                codes |= WRITES
            if "requestBody" in operation:
                codes |= MEDIA_TYPE
            if any(p.get("name") == "If-Match" for p in operation.get("parameters", [])):
                codes |= PRECONDITION
            for parameter in operation.get("parameters", []):
                # Every optional query parameter treats an empty value as not given (`?engine=`).
                if parameter.get("in") == "query" and not parameter.get("required"):
                    parameter["allowEmptyValue"] = True
            responses = operation.setdefault("responses", {})
            for code, description in codes.items():
                responses.setdefault(code, _response(description))
    return result
