"""The API's JSON parser: a bounded body (413 past API_MAX_BODY_BYTES) and 400 for anything that is not
plain JSON (deep nesting, NaN, lone surrogates), so no body can make the server answer 500."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.API_MAX_BODY_BYTES
        # Read one byte past the limit: a body without Content-Length is bounded too.
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestTooLarge(f"The request body is larger than {limit} bytes (API_MAX_BODY_BYTES).")
        try:
            text = raw.decode("utf-8")
            data = json.loads(text, parse_constant=_refuse_constant)
            # Strings must survive encoding (a lone surrogate cannot be stored or returned).
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
        except (ValueError, UnicodeError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        return data
