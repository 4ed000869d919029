"""One mechanism for API objects that hold a secret shown once (API tokens, inference keys).

Creating one, and rotating its secret, answer the object with its plaintext (`issued_serializer_class`), once;
every other answer leaves it out. A viewset mixes `SecretShownOnceMixin` in and names its serializers and its
rotate function; its schema documents the `create` and `rotate` answers (see `shown_once_schema`).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.exceptions import Conflict, api_error
from apps.core.choices import AuditVia
from apps.tenancy.tokens import TokenRevoked


def shown_once_schema(issued, rotation, rotate_description: str):
    """The viewset decorator documenting create (201) and rotate (200) as answering the issued secret."""
    return extend_schema_view(
        create=extend_schema(responses={201: issued}),
        rotate=extend_schema(request=rotation, responses={200: issued}, description=rotate_description),
    )


class SecretShownOnceMixin:
    # `create` and the `rotate` action. Set `issued_serializer_class` (the object with its plaintext),
    # `rotation_serializer_class` (the rotate request: `expires_at`) and `rotate_secret = staticmethod(f)`,
    # f(obj, actor=, via=, expires_at=) -> plaintext. (No docstring: the schema would show it as every
    # operation's description of the viewsets that mix this in.)

    issued_serializer_class = None
    rotation_serializer_class = None
    rotate_secret = None

    def issued(self, obj):
        return self.issued_serializer_class(obj, context=self.get_serializer_context()).data

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        return Response(self.issued(serializer.instance), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        obj = self.get_object()
        serializer = self.rotation_serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            plaintext = self.rotate_secret(
                obj, actor=request.user, via=AuditVia.API, expires_at=serializer.validated_data.get("expires_at")
            )
        except TokenRevoked as exc:
            raise Conflict(str(exc)) from exc
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        obj.refresh_from_db()
        obj.plaintext = plaintext
        return Response(self.issued(obj))
