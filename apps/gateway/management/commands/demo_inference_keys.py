"""`manage.py demo_inference_keys DIR`: an inference key named demo-load for every tenant, its plaintext in
DIR/<tenant>.key (mode 0600), for `make demo`'s load through the gateway. Run after `seed_demo`; running it
again changes nothing while each file still matches its key."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.gateway.keys import rotate_key
from apps.gateway.models import InferenceKey
from apps.tenancy.models import Tenant, hash_token

LABEL = "command:demo_inference_keys"
NAME = "demo-load"


class Command(BaseCommand):
    help = "Give every tenant a demo-load inference key, its plaintext in DIR/<tenant>.key."

    def add_arguments(self, parser):
        parser.add_argument("directory", help="Where the keys' plaintexts are written, one file per tenant.")

    def handle(self, *args, directory, **options):
        folder = Path(directory)
        made = [tenant.slug for tenant in Tenant.objects.order_by("slug") if self.key_for(tenant, folder)]
        self.stdout.write(f"Demo inference keys in {folder}/ ({len(made)} new: {', '.join(made) or 'none'}).")

    def key_for(self, tenant, folder: Path) -> bool:
        """The tenant's demo-load key, kept while its file holds the plaintext; else rotated (its plaintext
        is lost; the key and its metered usage stay), or made when it has none. True when a secret was made."""
        path = folder / f"{tenant.slug}.key"
        held = path.read_text().strip() if path.exists() else ""
        key = InferenceKey.objects.filter(tenant=tenant, name=NAME, revoked_at__isnull=True).order_by("pk").first()
        if key is not None and held and key.key_hash == hash_token(held):
            return False
        if key is not None:
            plaintext = rotate_key(key, via=AuditVia.COMMAND, actor_label=LABEL)
        else:
            key = InferenceKey(tenant=tenant, name=NAME)
            plaintext = key.new_secret()
            key.save()
            record_change(actor=None, actor_label=LABEL, obj=key, action=AuditAction.CREATE,
                          via=AuditVia.COMMAND)
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(plaintext + "\n")
        path.chmod(0o600)
        return True
