"""Portal pages of tokens and members. Tokens made here are bound to the tenant; the plaintext is shown
once. Members are managed by owners; `Membership.clean()` and `validate_removal()` keep the last owner."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction, AuditVia
from apps.tenancy.models import ApiToken, Membership, Tenant
from apps.web.forms.tenancy import AddMemberForm, RoleForm, TokenForm
from apps.web.htmx import is_fragment
from apps.web.portal.scope import OWN, READ, WRITE, tenant_page


def visible_tokens(request, tenant):
    """Owners (and staff) see every token of the tenant; others their own."""
    tokens = ApiToken.objects.filter(tenant=tenant).select_related("user")
    return tokens if request.scope.can_own else tokens.filter(user=request.user)


def _tokens_page(request, tenant, form=None, issued=None, status=200):
    context = {"tenant": tenant, "tokens": visible_tokens(request, tenant).order_by("revoked_at", "-created"),
               "form": form or TokenForm(), "issued": issued, "now": timezone.now()}
    template = "portal/partials/tokens.html" if is_fragment(request) else "portal/tokens.html"
    return render(request, template, context, status=status)


@tenant_page(READ, write_methods_need=WRITE)
@require_http_methods(["GET", "POST"])
def tokens(request, tenant):
    """The tenant's tokens (prefix, last use, expiry) and, for writers, a form that issues one."""
    if request.method == "GET":
        return _tokens_page(request, tenant)
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _tokens_page(request, tenant, form=form, status=422)
    token, plaintext = ApiToken.generate(user=request.user, tenant=tenant, name=form.cleaned_data["name"],
                                         expires_days=form.cleaned_data["expires_days"])
    try:
        token.full_clean()
    except ValidationError as exc:
        form.add_error(None, list(exc.messages))
        return _tokens_page(request, tenant, form=form, status=422)
    with transaction.atomic():
        token.save()
        record_change(actor=request.user, obj=token, action=AuditAction.CREATE, via=AuditVia.PORTAL)
    messages.success(request, f"Token {token.name} created. Copy it now: it is shown only once.")
    return _tokens_page(request, tenant, issued={"token": token, "plaintext": plaintext})


@tenant_page(WRITE)
@require_http_methods(["POST"])
def token_revoke(request, tenant, pk: int):
    """Revoke a token: its owner may, and a tenant owner may revoke any of the tenant's tokens."""
    token = get_object_or_404(visible_tokens(request, tenant), pk=pk)
    if not (token.user_id == request.user.pk or request.scope.can_own):
        raise PermissionDenied("Only the token's owner or a tenant owner may revoke it.")
    if token.revoked_at is None:
        with transaction.atomic():
            before = snapshot(token)
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at", "updated"])
            record_change(actor=request.user, obj=token, action=AuditAction.UPDATE, via=AuditVia.PORTAL,
                          before=before)
        messages.success(request, f"Token {token.prefix}… revoked; requests with it now get 401.")
    if is_fragment(request):
        return _tokens_page(request, tenant)
    return redirect(reverse("web:tokens", args=[tenant.slug]))


def _members_page(request, tenant, form=None, errors=None, status=200):
    members = Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    context = {"tenant": tenant, "members": members, "form": form or AddMemberForm(), "row_errors": errors or {}}
    template = "portal/partials/members.html" if is_fragment(request) else "portal/members.html"
    return render(request, template, context, status=status)


@tenant_page(READ, write_methods_need=OWN)
@require_http_methods(["GET", "POST"])
def members(request, tenant):
    """Who belongs to the tenant with which role; owners add existing users by username or e-mail."""
    if request.method == "GET":
        return _members_page(request, tenant)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        membership = Membership(tenant=tenant, user=form.cleaned_data["user"], role=form.cleaned_data["role"])
        try:
            membership.full_clean()
        except ValidationError as exc:
            for field, problems in exc.message_dict.items():
                form.add_error("user" if field in ("user", "__all__") else field, problems)
        else:
            with transaction.atomic():
                membership.save()
                record_change(actor=request.user, obj=membership, action=AuditAction.CREATE, via=AuditVia.PORTAL)
            messages.success(request, f"{membership.user.get_username()} added as {membership.get_role_display()}.")
            return _members_page(request, tenant)
    return _members_page(request, tenant, form=form, status=422)


@tenant_page(OWN)
@require_http_methods(["POST"])
def member_change(request, tenant, pk: int):
    """Change a member's role (`action=role`) or remove them (`action=remove`); the last owner stays."""
    membership = get_object_or_404(Membership.objects.filter(tenant=tenant).select_related("user"), pk=pk)
    name = membership.user.get_username()
    try:
        with transaction.atomic():
            # Two owners demoting each other at once must not both pass the last-owner check.
            Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
            before = snapshot(membership)
            if request.POST.get("action") == "remove":
                membership.validate_removal()
                record_change(actor=request.user, obj=membership, action=AuditAction.DELETE, via=AuditVia.PORTAL,
                              before=before)
                membership.delete()
                messages.success(request, f"{name} removed from {tenant.slug}.")
            else:
                form = RoleForm(request.POST)
                if not form.is_valid():
                    raise ValidationError({"role": form.errors.get("role", ["Choose a role."])})
                membership.role = form.cleaned_data["role"]
                membership.full_clean()
                membership.save(update_fields=["role", "updated"])
                record_change(actor=request.user, obj=membership, action=AuditAction.UPDATE, via=AuditVia.PORTAL,
                              before=before)
                messages.success(request, f"{name} is now {membership.get_role_display()}.")
    except ValidationError as exc:
        return _members_page(request, tenant, errors={membership.pk: exc.messages}, status=422)
    if is_fragment(request):
        return _members_page(request, tenant)
    return redirect(reverse("web:members", args=[tenant.slug]))
