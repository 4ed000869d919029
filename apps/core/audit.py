"""Recording changes: the one function admin, API and management commands call after each write.

Calls are explicit (no signal receivers) so a write without an audit entry is visible in review.
Snapshots redact secrets: encrypted fields and anything a model lists in `AUDIT_REDACTED_FIELDS`.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models

from apps.core.choices import AuditAction, AuditVia
from apps.core.models import AuditEntry

REDACTED = "<redacted>"


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value


def snapshot(obj: models.Model) -> dict[str, Any]:
    """A JSON-ready picture of an object's concrete fields, with secrets replaced by a marker."""
    redacted = set(getattr(obj, "AUDIT_REDACTED_FIELDS", ()))
    data: dict[str, Any] = {}
    for field in obj._meta.concrete_fields:
        value = getattr(obj, field.attname)
        if field.name in redacted or getattr(field, "redacted", False):
            value = REDACTED if value else ""
        data[field.name] = _jsonable(value)
    extra = getattr(obj, "audit_extra", None)
    if extra is not None:
        data.update(extra())
    return data


def record_change(
    *,
    actor,
    obj: models.Model,
    action: AuditAction | str,
    via: AuditVia | str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    actor_label: str = "",
) -> AuditEntry:
    """Write one AuditEntry; `after` defaults to a fresh snapshot unless the object was deleted.

    `actor_label` names a non-user actor (e.g. "command:seed_demo") when `actor` is None.
    """
    if after is None and action != AuditAction.DELETE:
        after = snapshot(obj)
    user = actor if getattr(actor, "is_authenticated", False) else None
    tenant_id = getattr(obj, "tenant_id", None)
    if tenant_id is None and obj._meta.model_name == "tenant":
        tenant_id = obj.pk
    return AuditEntry.objects.create(
        actor=user,
        actor_repr=user.get_username() if user else actor_label,
        via=via,
        action=action,
        content_type=ContentType.objects.get_for_model(obj),
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        # A deleted tenant's own entry keeps no FK (the row is gone); its repr says which it was.
        tenant_id=tenant_id if not (action == AuditAction.DELETE and obj._meta.model_name == "tenant") else None,
        before=before,
        after=after,
    )
