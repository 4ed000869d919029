"""Building blocks shared by every domain app: timestamps and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models

from apps.core.access import RestrictedQuerySet, tenant_owned
from apps.core.choices import AuditAction, AuditVia


class TimestampedModel(models.Model):
    """Abstract base that records when a row was created and last changed."""

    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class AuditEntryQuerySet(RestrictedQuerySet):
    # Entries are history: nobody but staff changes or deletes them.
    rule = tenant_owned("tenant", writers=frozenset())

    def for_object(self, obj: models.Model) -> AuditEntryQuerySet:
        return self.filter(content_type=ContentType.objects.get_for_model(obj), object_id=str(obj.pk))


class AuditEntry(models.Model):
    """One change to one object: who, when, through which door, and the state before and after."""

    time = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_repr = models.CharField(max_length=150, blank=True)
    via = models.CharField(max_length=16, choices=AuditVia.choices)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT, related_name="+")
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["content_type", "object_id"], name="core_audit_object_idx")]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.actor_repr or 'system'} {self.action} {self.object_repr} via {self.via}"
