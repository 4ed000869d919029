"""Tenants (teams), their members with roles, and API tokens for automation."""

from __future__ import annotations

import hashlib
import secrets
import string
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.core.access import (
    RestrictedQuerySet,
    tenant_owned,
)
from apps.core.choices import Role
from apps.core.fields import EncryptedTextField
from apps.core.models import TimestampedModel
from apps.core.validators import dns1123_label
from apps.tenancy.choices import PLATFORM_DEFAULT_CLASS
from apps.tenancy.queues import PriorityClass, TenantQueue  # noqa: F401  (models of this app)

TOKEN_PREFIX_LENGTH = 8
LAST_OWNER_MESSAGE = "The last owner of a tenant cannot be {action}; make another member an owner first."


# Only owners change a tenant, its members and its colleagues' tokens.
OWNERS = frozenset({Role.OWNER})


class TenantQuerySet(RestrictedQuerySet):
    """Members see the tenants they belong to."""

    rule = tenant_owned("pk", writers=OWNERS)


class Tenant(TimestampedModel):
    """A team: owns a namespace per cluster, a queue of GPU quota, members and tokens."""

    slug = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    max_priority_class = models.ForeignKey(
        "tenancy.PriorityClass", null=True, blank=True, on_delete=models.PROTECT, related_name="capped_tenants",
        help_text="The highest class the tenant's services may run at; empty: any class.")
    default_priority_class = models.ForeignKey(
        "tenancy.PriorityClass", null=True, blank=True, on_delete=models.PROTECT, related_name="defaulted_tenants",
        help_text=f"The class of services that name none; empty: {PLATFORM_DEFAULT_CLASS}.")
    hf_token = EncryptedTextField(
        blank=True, help_text="A Hugging Face access token for the tenant's private or gated models and adapters: "
        "kept encrypted, never shown. Engines get it as HF_TOKEN from the Secret hf-token in the tenant's namespace.")

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        highest, default = self.max_priority_class, self.default_priority_class
        if highest is not None and default is not None and default.value > highest.value:
            from django.core.exceptions import ValidationError

            raise ValidationError({"default_priority_class": ValidationError(
                f"The default class {default} is above the tenant's highest, {highest}.", code="above_highest")})

    def priority_class_for(self, named: PriorityClass | None) -> PriorityClass | None:
        """The class a service runs at: its own, else the tenant's default, else the platform's."""
        return named or self.default_priority_class or PriorityClass.objects.platform_default()



# One answer for "no such account" and "an account that may not be added" (deactivated), in the API and the
# portal alike, so adding a member cannot be used to learn which usernames exist.
NO_SUCH_USER = "No user '{value}'; they need an account before they can be added."


def addable_users():
    """The accounts an owner may add to a tenant: active ones."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(is_active=True)


class MembershipQuerySet(RestrictedQuerySet):
    """Members see the memberships of their tenants."""

    rule = tenant_owned("tenant", writers=OWNERS)


class Membership(TimestampedModel):
    """A user's role in one tenant."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="tenancy_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.user_id and self.tenant_id:
            clash = Membership.objects.filter(user_id=self.user_id, tenant_id=self.tenant_id).exclude(
                pk=self.pk
            )
            if clash.exists():
                raise ValidationError(
                    {"user": ValidationError("This user is already a member.", code="unique")}
                )
        if self.pk and self.role != Role.OWNER and self._is_last_owner():
            raise ValidationError(
                {"role": ValidationError(LAST_OWNER_MESSAGE.format(action="demoted"), code="last_owner")}
            )

    def _is_last_owner(self) -> bool:
        """True when the stored row is the tenant's only owner (another owner must exist before it goes)."""
        stored = Membership.objects.filter(pk=self.pk).values_list("role", "tenant_id").first()
        if stored is None or stored[0] != Role.OWNER:
            return False
        return not Membership.objects.filter(tenant_id=stored[1], role=Role.OWNER).exclude(pk=self.pk).exists()

    def validate_removal(self) -> None:
        """Raise ValidationError when removing this membership would leave its tenant without an owner."""
        from django.core.exceptions import ValidationError

        if self.pk and self._is_last_owner():
            raise ValidationError(
                {"role": ValidationError(LAST_OWNER_MESSAGE.format(action="removed"), code="last_owner")}
            )

    def delete(self, *args, **kwargs):
        # Every door (API, admin, portal) deletes through here, so none can orphan a tenant.
        self.validate_removal()
        return super().delete(*args, **kwargs)



def hash_token(plaintext: str) -> str:
    """Tokens carry 256 bits of randomness, so one SHA-256 is enough (no slow KDF needed)."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


class ApiTokenQuerySet(RestrictedQuerySet):
    """Their own tokens and those bound to their tenants; a tenant-bound token sees that tenant's only."""

    rule = tenant_owned("tenant", writers=OWNERS, user_field="user")


class ApiToken(TimestampedModel):
    """A bearer token for automation. Only its SHA-256 is stored; the plaintext is shown once."""

    AUDIT_REDACTED_FIELDS = ("key_hash",)

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        help_text="When set, the token acts only within this tenant.",
    )
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=TOKEN_PREFIX_LENGTH, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    # When the current secret was issued (creation or the last rotation); the expiry cap counts from here.
    issued_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(help_text="Required; at most TOKEN_MAX_DAYS after the secret was issued.")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or self.user})"

    @classmethod
    def generate(cls, *, user, tenant: Tenant | None = None, name: str = "", expires_days: int | None = None):
        """Build (unsaved) a token and return it with its plaintext, which is never stored.
        Without `expires_days` it lives the longest allowed (TOKEN_MAX_DAYS)."""
        token = cls(user=user, tenant=tenant, name=name)
        plaintext = token.new_secret(expires_days=expires_days)
        return token, plaintext

    def new_secret(self, *, expires_days: int | None = None, expires_at=None) -> str:
        """Give the token a fresh secret (issue or rotate) and an expiry, by default the cap; return the
        plaintext. The old secret, if any, stops working once this is saved."""
        # The first character is never "-": a prefix such as "-x3Fq9aB" would read as an option to
        # `manage.py rotate_token PREFIX` (and to most shells' tools).
        plaintext = secrets.choice(string.ascii_letters + string.digits) + secrets.token_urlsafe(32)
        self.prefix = plaintext[:TOKEN_PREFIX_LENGTH]
        self.key_hash = hash_token(plaintext)
        self.issued_at = timezone.now()
        days = settings.TOKEN_MAX_DAYS if expires_days is None else expires_days
        self.expires_at = expires_at or self.issued_at + timedelta(days=days)
        return plaintext

    @property
    def latest_expiry(self):
        """The furthest the expiry may be: TOKEN_MAX_DAYS after the current secret was issued."""
        return self.issued_at + timedelta(days=settings.TOKEN_MAX_DAYS)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if (
            self.tenant_id
            and self.user_id
            and not Membership.objects.filter(user_id=self.user_id, tenant_id=self.tenant_id).exists()
        ):
            raise ValidationError({"tenant": "The token's user is not a member of this tenant."})
        if self.expires_at is not None and self.expires_at > self.latest_expiry:
            raise ValidationError({"expires_at": ValidationError(
                "A token may live at most %(days)d days from when its secret was issued (TOKEN_MAX_DAYS); "
                "rotate it for a new period.", code="max_lifetime", params={"days": settings.TOKEN_MAX_DAYS})})

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()

    @property
    def is_active(self) -> bool:
        return not (self.is_revoked or self.is_expired)

