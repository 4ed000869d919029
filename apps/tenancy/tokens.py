"""Rotating an API token: one function for the API action and the `rotate_token` command."""

from __future__ import annotations

from django.db import transaction

from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction
from apps.tenancy.models import ApiToken


class TokenRevoked(Exception):
    """A revoked token stays revoked: rotating it would bring it back."""


def rotate_token(token: ApiToken, *, via: str, actor=None, actor_label: str = "", expires_at=None,
                 expires_days: int | None = None) -> str:
    """Give `token` a new secret and a new expiry (by default the longest allowed) and return the plaintext.
    The old secret is refused from the moment this commits. Raises ValidationError for an expiry past the
    cap, TokenRevoked for a revoked token."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.is_revoked:
            raise TokenRevoked("A revoked token cannot be rotated; issue a new one.")
        before = snapshot(token)
        plaintext = token.new_secret(expires_at=expires_at, expires_days=expires_days)
        token.full_clean()
        token.save()
        record_change(actor=actor, actor_label=actor_label, obj=token, action=AuditAction.UPDATE, via=via,
                      before=before)
    return plaintext
