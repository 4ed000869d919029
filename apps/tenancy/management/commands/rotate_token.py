"""`manage.py rotate_token PREFIX [--expires-days N]`: give a token a new secret, printed once.

The old secret is refused from then on; the token keeps its id, name, user and tenant.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.core.choices import AuditVia
from apps.tenancy.management.commands.issue_token import check_expires_days
from apps.tenancy.models import ApiToken
from apps.tenancy.tokens import TokenRevoked, rotate_token


class Command(BaseCommand):
    help = "Rotate an API token (found by the prefix `issue_token` printed) and print the new secret once."

    def add_arguments(self, parser):
        parser.add_argument("prefix", help="The token's prefix (its first 8 characters).")
        parser.add_argument(
            "--expires-days", type=int, help="Expire after this many days (default and maximum: TOKEN_MAX_DAYS)."
        )

    def handle(self, *args, prefix, expires_days, **options):
        check_expires_days(expires_days)
        tokens = list(ApiToken.objects.filter(prefix=prefix)[:2])
        if not tokens:
            raise CommandError(f"No token with prefix {prefix!r}.")
        if len(tokens) > 1:
            raise CommandError(f"More than one token has prefix {prefix!r}; rotate it through the API by id.")
        try:
            plaintext = rotate_token(
                tokens[0], actor_label="command:rotate_token", via=AuditVia.COMMAND, expires_days=expires_days
            )
        except TokenRevoked as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        token = ApiToken.objects.get(pk=tokens[0].pk)
        self.stdout.write(plaintext)
        self.stderr.write(
            f"Token {prefix}… is now {token.prefix}…, expires {token.expires_at:%Y-%m-%d %H:%M} UTC. "
            "The old secret no longer works; the new one is not shown again."
        )
