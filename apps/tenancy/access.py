"""Who may see and change what: the single source every `for_user()` queryset method consults.

A request authenticated by a tenant-bound API token acts only within that tenant, even for staff;
the authentication class records the binding on the user object as `token_tenant_id`.
"""

from __future__ import annotations

from django.db.models import QuerySet

from apps.tenancy.choices import WRITER_ROLES


def token_tenant_id(user) -> int | None:
    return getattr(user, "token_tenant_id", None)


def is_platform_staff(user) -> bool:
    """Staff with an unrestricted session or token see and change everything."""
    return bool(user and user.is_authenticated and user.is_staff and token_tenant_id(user) is None)


def member_tenant_ids(user) -> QuerySet:
    """A subquery of the tenant ids the user belongs to (narrowed by a tenant-bound token)."""
    from apps.tenancy.models import Membership

    memberships = Membership.objects.filter(user_id=user.pk)
    bound = token_tenant_id(user)
    if bound is not None:
        memberships = memberships.filter(tenant_id=bound)
    return memberships.values("tenant_id")


def tenant_roles(user) -> dict[int, str]:
    """tenant id → role for the user, computed once per request and cached on the user object."""
    if not (user and user.is_authenticated):
        return {}
    cached = getattr(user, "_tenant_roles_cache", None)
    if cached is None:
        from apps.tenancy.models import Membership

        memberships = Membership.objects.filter(user_id=user.pk)
        bound = token_tenant_id(user)
        if bound is not None:
            memberships = memberships.filter(tenant_id=bound)
        cached = dict(memberships.values_list("tenant_id", "role"))
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
    from apps.tenancy.choices import Role

    return is_platform_staff(user) or (
        tenant_id is not None and tenant_roles(user).get(tenant_id) == Role.OWNER
    )
