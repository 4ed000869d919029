"""Which tenant a portal page works in and what the caller may do there.

Every portal view is wrapped by `tenant_page(needs=...)`: the tenant comes from
`Tenant.objects.restrict(user)`, so another tenant's URL is a 404 whatever follows it, and a write the
caller's role does not allow is a 403 on the server whatever the page showed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404

from apps.core.access import can_own_tenant, can_write_tenant, is_platform_staff, tenant_roles
from apps.tenancy.models import Tenant

READ, WRITE, OWN = "read", "write", "own"


@dataclass(frozen=True)
class Scope:
    """The tenant of the page and the caller's rights in it (what templates show and views enforce)."""

    tenant: Tenant
    role: str  # "owner", "operator", "viewer", or "staff" for platform staff who are not members
    can_write: bool
    can_own: bool

    @classmethod
    def of(cls, user, tenant: Tenant) -> Scope:
        role = tenant_roles(user).get(tenant.pk) or ("staff" if is_platform_staff(user) else "")
        return cls(tenant=tenant, role=role, can_write=can_write_tenant(user, tenant.pk),
                   can_own=can_own_tenant(user, tenant.pk))

    def allows(self, needs: str) -> bool:
        return needs == READ or (needs == WRITE and self.can_write) or (needs == OWN and self.can_own)


def tenant_page(needs: str = READ, write_methods_need: str | None = None):
    """Decorate a view taking `(request, tenant, ...)`: 404 outside the caller's tenants, 403 without the
    right. `needs` guards every method; `write_methods_need` additionally guards POST/PUT/PATCH/DELETE."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request, tenant: str, *args, **kwargs):
            row = get_object_or_404(Tenant.objects.restrict(request.user), slug=tenant)
            scope = Scope.of(request.user, row)
            unsafe = request.method not in ("GET", "HEAD", "OPTIONS")
            if not scope.allows(needs) or (unsafe and write_methods_need and not scope.allows(write_methods_need)):
                raise PermissionDenied("Your role in this tenant does not allow this.")
            request.scope = scope
            return view(request, row, *args, **kwargs)

        return wrapper

    return decorate


def portal_context(request) -> dict:
    """Template context for every page: the tenant switcher's choices and the current scope."""
    user = getattr(request, "user", None)
    if not (user and user.is_authenticated):
        return {}
    return {
        "scope": getattr(request, "scope", None),
        # Called by the template only when it draws the switcher (never by htmx partials).
        "switch_tenants": lambda: list(Tenant.objects.restrict(user).only("slug", "name")[:200]),
    }
