"""Who may see and change what: the one access rule every project model declares and every door consults.

Each model's default manager is a `RestrictedQuerySet` whose `rule` says, once, how a row reaches its
tenant (`tenant_owned("service__tenant")`) or that only staff see it (`staff_only("why")`). The API,
the portal, the admin's non-staff views, the exports and the tasks that act for a user all ask
`Model.objects.restrict(user, action)`, action being view, change or delete; `tests/core/
test_access_registry.py` walks the model registry, so a model added without a rule fails a test.

A request authenticated by a tenant-bound API token acts only within that tenant, even for staff;
the authentication class records the binding on the user object as `token_tenant_id`. Memberships are
read through the user's `memberships` relation, so this module needs no import of the tenancy app.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.db.models import Q, QuerySet

from apps.core.choices import WRITER_ROLES, Role

VIEW, CHANGE, DELETE = "view", "change", "delete"
ACTIONS = (VIEW, CHANGE, DELETE)


def token_tenant_id(user) -> int | None:
    return getattr(user, "token_tenant_id", None)


def is_platform_staff(user) -> bool:
    """Staff with an unrestricted session or token see and change everything."""
    return bool(user and user.is_authenticated and user.is_staff and token_tenant_id(user) is None)


def _memberships(user) -> QuerySet:
    memberships = user.memberships.all()
    bound = token_tenant_id(user)
    return memberships if bound is None else memberships.filter(tenant_id=bound)


def member_tenant_ids(user, roles=None) -> QuerySet:
    """A subquery of the tenant ids the user belongs to (with one of `roles`, when given), narrowed by a
    tenant-bound token."""
    memberships = _memberships(user)
    if roles is not None:
        memberships = memberships.filter(role__in=list(roles))
    return memberships.values("tenant_id")


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


@dataclass(frozen=True)
class AccessRule:
    """How a model's rows reach their tenant. `tenant` is the lookup path from the model to the tenant
    (`"tenant"`, `"service__tenant"`, `"pk"` for the tenant itself); None means staff only, for the
    `reason` given. Members of the tenant view its rows; members with one of `writers` change and delete
    them. `platform_wide` rows (no tenant) are visible to every signed-in user and writable by staff
    only. `user_field` names a user whose rows they are whatever the tenant (a person's own tokens)."""

    tenant: str | None
    writers: frozenset = frozenset(WRITER_ROLES)
    platform_wide: bool = False
    user_field: str | None = None
    reason: str = ""

    def q(self, user, action: str) -> Q:
        """The rows a signed-in, non-staff user may act on (staff and anonymous users never get here)."""
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        if self.tenant is None:
            return Q(pk__in=[])
        roles = None if action == VIEW else self.writers
        allowed = Q(**{f"{self.tenant}__in": member_tenant_ids(user, roles)})
        if self.platform_wide and action == VIEW:
            allowed |= Q(**{f"{self.tenant}__isnull": True})
        if self.user_field:
            allowed |= Q(**{self.user_field: user.pk})
            if token_tenant_id(user) is not None:
                # A tenant-bound token acts on that tenant's rows only, not on its user's other rows.
                allowed &= Q(**{self.tenant: token_tenant_id(user)})
        return allowed

    def tenant_id_of(self, obj) -> int | None:
        """The tenant id of one loaded row, by the same path (one related object loaded per hop)."""
        *hops, last = self.tenant.split("__")
        for hop in hops:
            obj = getattr(obj, hop)
            if obj is None:
                return None
        return obj.pk if last == "pk" else getattr(obj, f"{last}_id")

    def allows(self, user, obj, action: str) -> bool:
        """The same answer as `restrict` for one row already in memory, from the cached roles."""
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        if is_platform_staff(user):
            return True
        if not (user and user.is_authenticated) or self.tenant is None:
            return False
        tenant_id = self.tenant_id_of(obj)
        bound = token_tenant_id(user)
        if self.user_field and getattr(obj, f"{self.user_field}_id") == user.pk and bound in (None, tenant_id):
            return True
        if tenant_id is None:
            return self.platform_wide and action == VIEW
        role = tenant_roles(user).get(tenant_id)
        return role is not None and (action == VIEW or role in self.writers)


def rule_of(model) -> AccessRule | None:
    """The rule a model declares through its default manager (None when it declares none)."""
    return getattr(model._default_manager.all(), "rule", None)


def allowed(user, obj, action: str) -> bool:
    """May `user` take `action` on the loaded row `obj`? The row-level twin of `restrict`."""
    rule = rule_of(type(obj))
    if rule is None:
        raise TypeError(f"{type(obj).__name__} declares no access rule")
    return rule.allows(user, obj, action)


def refusal(user, obj, action: str = CHANGE) -> str:
    """Why `user` may not take `action` on the loaded row `obj`: their role in its tenant and the roles that may
    (the 403's words, so an operator is not told that viewers read only)."""
    rule = rule_of(type(obj))
    tenant_id = rule.tenant_id_of(obj) if rule is not None and rule.tenant else None
    writers = rule.writers if tenant_id is not None else frozenset()
    verb = "delete" if action == DELETE else "change"
    if not writers:
        return f"Only platform staff may {verb} this."
    needed = " or ".join(role.value for role in Role if role in writers)
    role = tenant_roles(user).get(tenant_id)
    if role == Role.VIEWER:
        return f"Your role here is viewer, and viewers read only; to {verb} this you need the {needed} role."
    if role:
        return f"Your role here is {role}, and {role}s cannot {verb} this; it needs the {needed} role."
    return f"You are not a member of this tenant; to {verb} this you need the {needed} role in it."


def tenant_owned(path: str, **options) -> AccessRule:
    """The rule of a model whose rows belong to the tenant at `path`."""
    return AccessRule(tenant=path, **options)


def staff_only(reason: str) -> AccessRule:
    """The rule of a model that is no tenant's: platform infrastructure or the workers' bookkeeping."""
    if not reason:
        raise ValueError("a staff-only rule says why the model belongs to no tenant")
    return AccessRule(tenant=None, reason=reason)


class RestrictedQuerySet(models.QuerySet):
    """The one access mechanism: subclasses (or `restricted(rule)`) set `rule`, and `restrict(user,
    action)` gives staff every row, anonymous users none and members what the rule allows."""

    rule: AccessRule | None = None

    def restrict(self, user, action: str = VIEW):
        if self.rule is None:
            raise TypeError(f"{self.model.__name__} declares no access rule")
        if is_platform_staff(user):
            return self
        if not (user and user.is_authenticated):
            return self.none()
        # Every path is to-one and tenants come as a subquery, so the filter never repeats a row.
        return self.filter(self.rule.q(user, action))


def restricted(rule: AccessRule, queryset: type[RestrictedQuerySet] = RestrictedQuerySet) -> models.Manager:
    """A default manager enforcing `rule`: the one line a model needs, `objects = restricted(...)`."""
    ruled = type(f"{queryset.__name__}Ruled", (queryset,), {"rule": rule, "__module__": queryset.__module__})
    return ruled.as_manager()
