"""`manage.py issue_token USERNAME [--tenant SLUG] [--expires-days N]`: print a new API token once.

Every token expires: by default after TOKEN_MAX_DAYS, which is also the longest allowed."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.tenancy.models import ApiToken, Tenant


class Command(BaseCommand):
    help = "Issue an API token for a user (optionally bound to one tenant) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--tenant", help="Bind the token to this tenant (slug); the user must be a member.")
        parser.add_argument(
            "--expires-days", type=int, help="Expire after this many days (default and maximum: TOKEN_MAX_DAYS)."
        )
        parser.add_argument("--name", default="", help="A label for the token.")

    def handle(self, *args, username, tenant, expires_days, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        check_expires_days(expires_days)
        bound = None
        if tenant:
            bound = Tenant.objects.filter(slug=tenant).first()
            if bound is None:
                raise CommandError(f"No tenant with slug {tenant!r}.")
        token, plaintext = ApiToken.generate(user=user, tenant=bound, name=name, expires_days=expires_days)
        try:
            token.full_clean()
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        token.save()
        record_change(
            actor=None, actor_label="command:issue_token", obj=token, action=AuditAction.CREATE, via=AuditVia.COMMAND
        )
        self.stdout.write(plaintext)
        scope = f"tenant {bound.slug}" if bound else "all of the user's tenants"
        self.stderr.write(
            f"Token {token.prefix}… for {user.username}, {scope}, expires {token.expires_at:%Y-%m-%d %H:%M} UTC. "
            "It is not shown again."
        )


def check_expires_days(expires_days: int | None) -> None:
    """--expires-days is between 1 and TOKEN_MAX_DAYS (shared with `rotate_token`)."""
    if expires_days is None:
        return
    if expires_days < 1:
        raise CommandError("--expires-days must be at least 1.")
    if expires_days > settings.TOKEN_MAX_DAYS:
        raise CommandError(f"--expires-days must be at most {settings.TOKEN_MAX_DAYS} (TOKEN_MAX_DAYS).")
