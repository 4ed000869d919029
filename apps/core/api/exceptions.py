"""API errors beyond DRF's own, and the translation of Django validation errors into API errors."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.fields import get_error_detail
from rest_framework.views import exception_handler as drf_handler

from apps.core.api.parsers import RequestTooLarge

UNIQUE_CODES = frozenset({"unique", "unique_together"})
# A name clash, or a removal refused because the object is in use: the request conflicts with the current state.
CONFLICT_CODES = UNIQUE_CODES | {"in_use"}


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PreconditionFailed(APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The resource changed since you read it (If-Match does not match its ETag)."
    default_code = "precondition_failed"


def _codes(error: DjangoValidationError) -> set[str]:
    return (
        {e.code for e in error.error_list}
        if not hasattr(error, "error_dict")
        else {e.code for errors in error.error_dict.values() for e in errors}
    )


def api_error(error: DjangoValidationError) -> APIException:
    """A 409 when the only problem is a name clash or an object in use, otherwise a 400 with the same field
    errors. An error of no field is `{"detail": "..."}`, the shape of every other error without a field (the
    schema's; a bare list of sentences, as DRF would render it, broke it: the schema fuzz met one on a 409)."""
    detail = get_error_detail(error)
    if not hasattr(error, "error_dict"):
        detail = {"detail": " ".join(str(message) for message in detail)}
    if _codes(error) <= CONFLICT_CODES:
        conflict = Conflict(detail)
        conflict.detail = detail
        return conflict
    return ValidationError(detail)


def exception_handler(exc, context):
    """DRF's handler, plus Django's body-size refusal as a 413 in JSON (DRF reads `request.body` for JSON
    and form bodies, where Django checks Content-Length and would otherwise answer an HTML 400)."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.API_MAX_BODY_BYTES
        exc = RequestTooLarge(f"The request body is larger than {limit} bytes (API_MAX_BODY_BYTES).")
    return drf_handler(exc, context)
