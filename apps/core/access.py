"""Who may see and change what: the single source every `for_user()` queryset method consults.

A request authenticated by a tenant-bound API token acts only within that tenant, even for staff;
the authentication class records the binding on the user object as `token_tenant_id`. Memberships are
read through the user's `memberships` relation, so this module needs no import of the tenancy app.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q, QuerySet

from apps.core.choices import WRITER_ROLES, Role


def token_tenant_id(user) -> int | None:
    return getattr(user, "token_tenant_id", None)


def is_platform_staff(user) -> bool:
    """Staff with an unrestricted session or token see and change everything."""
    return bool(user and user.is_authenticated and user.is_staff and token_tenant_id(user) is None)


def _memberships(user) -> QuerySet:
    memberships = user.memberships.all()
    bound = token_tenant_id(user)
    return memberships if bound is None else memberships.filter(tenant_id=bound)


def member_tenant_ids(user) -> QuerySet:
    """A subquery of the tenant ids the user belongs to (narrowed by a tenant-bound token)."""
    return _memberships(user).values("tenant_id")


def tenant_roles(user) -> dict[int, str]:
    """tenant id → role for the user, computed once per request and cached on the user object."""
    if not (user and user.is_authenticated):
        return {}
    cached = getattr(user, "_tenant_roles_cache", None)
    if cached is None:
        cached = dict(_memberships(user).values_list("tenant_id", "role"))
        user._tenant_roles_cache = cached
    return cached


def can_read_tenant(user, tenant_id: int | None) -> bool:
    return is_platform_staff(user) or (tenant_id is not None and tenant_id in tenant_roles(user))


def can_write_tenant(user, tenant_id: int | None) -> bool:
    """Staff always; otherwise owners and operators of that tenant. Platform-wide (None) is staff-only."""
    if is_platform_staff(user):
        return True
    return tenant_id is not None and tenant_roles(user).get(tenant_id) in WRITER_ROLES


def can_own_tenant(user, tenant_id: int | None) -> bool:
    return is_platform_staff(user) or (tenant_id is not None and tenant_roles(user).get(tenant_id) == Role.OWNER)


class TenantScopedQuerySet(models.QuerySet):
    """The one tenant-scoping rule: staff see every row, anonymous users none, members the rows of their
    tenants. `tenant_field` names the tenant id; `platform_wide_visible` also shows rows without a tenant."""

    tenant_field = "tenant_id"
    platform_wide_visible = False

    def for_user(self, user):
        if is_platform_staff(user):
            return self
        if not (user and user.is_authenticated):
            return self.none()
        return self.filter(self.visible_to(user))

    def visible_to(self, user) -> Q:
        """The rows a signed-in, non-staff user sees."""
        visible = Q(**{f"{self.tenant_field}__in": member_tenant_ids(user)})
        if self.platform_wide_visible:
            visible |= Q(**{f"{self.tenant_field}__isnull": True})
        return visible
