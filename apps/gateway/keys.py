"""Rotating and revoking an inference key, audited the same way whatever door it came through."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction
from apps.gateway.models import InferenceKey
from apps.tenancy.tokens import TokenRevoked


def rotate_key(key: InferenceKey, *, via: str, actor=None, expires_at=None, actor_label: str = "") -> str:
    """A new secret and expiry for `key`; returns the plaintext. The old secret is refused once this
    commits (the gateway's next snapshot). Raises ValidationError past the cap, TokenRevoked if revoked."""
    with transaction.atomic():
        key = InferenceKey.objects.select_for_update().get(pk=key.pk)
        if key.is_revoked:
            raise TokenRevoked("A revoked key cannot be rotated; issue a new one.")
        before = snapshot(key)
        plaintext = key.new_secret(expires_at=expires_at)
        key.full_clean()
        key.save()
        record_change(actor=actor, obj=key, action=AuditAction.UPDATE, via=via, before=before,
                      actor_label=actor_label)
    return plaintext


def revoke_key(key: InferenceKey, *, via: str, actor=None) -> InferenceKey:
    """Revocation is final; revoking twice keeps the first time."""
    with transaction.atomic():
        key = InferenceKey.objects.select_for_update().get(pk=key.pk)
        if not key.is_revoked:
            before = snapshot(key)
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at", "updated"])
            record_change(actor=actor, obj=key, action=AuditAction.UPDATE, via=via, before=before)
    return key
