"""The base viewset: queryset scoped by `restrict()`, object write permission, audit on every write."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from rest_framework import viewsets
from rest_framework.permissions import IsAuthenticated

from apps.core.api.exceptions import Conflict, api_error
from apps.core.api.pagination import StandardPagination
from apps.core.api.permissions import ObjectWritePermission
from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction, AuditVia
from apps.core.ids import ASCII_DIGITS

# URL keys in ASCII digits only (apps.core.ids), so `1١` is a 404, not object 11. Every viewset routed by
# primary key sets it.
ASCII_PK = ASCII_DIGITS


class ScopedModelViewSet(viewsets.ModelViewSet):
    """Subclasses set `queryset`; every request sees only `queryset.restrict(request.user)`."""

    lookup_value_regex = ASCII_PK

    permission_classes = [IsAuthenticated, ObjectWritePermission]
    pagination_class = StandardPagination

    def get_queryset(self):
        return self.queryset.restrict(self.request.user)

    def perform_create(self, serializer):
        try:
            with transaction.atomic():
                instance = serializer.save()
                record_change(actor=self.request.user, obj=instance, action=AuditAction.CREATE, via=AuditVia.API)
        except IntegrityError as exc:
            # A concurrent write won the race that clean() checked; the constraint caught it.
            raise Conflict("The request conflicts with an object written concurrently.") from exc

    def perform_update(self, serializer):
        try:
            with transaction.atomic():
                before = snapshot(type(serializer.instance).objects.get(pk=serializer.instance.pk))
                instance = serializer.save()
                record_change(
                    actor=self.request.user, obj=instance, action=AuditAction.UPDATE, via=AuditVia.API, before=before
                )
        except IntegrityError as exc:
            raise Conflict("The request conflicts with an object written concurrently.") from exc

    def perform_destroy(self, instance):
        try:
            with transaction.atomic():
                record_change(
                    actor=self.request.user,
                    obj=instance,
                    action=AuditAction.DELETE,
                    via=AuditVia.API,
                    before=snapshot(instance),
                )
                instance.delete()
        except DjangoValidationError as exc:
            # A model that refuses its own deletion (e.g. a tenant's last owner) says why, as a 400.
            raise api_error(exc) from exc
        except ProtectedError as exc:
            # A count, not names: the users may belong to tenants the caller cannot see.
            count = len(exc.protected_objects)
            raise Conflict(f"{instance} is still used by {count} other object(s); remove those first.") from exc
