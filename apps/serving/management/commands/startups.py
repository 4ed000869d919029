"""`manage.py startups TENANT/SERVICE [--wait SECONDS]`: print a service's modelled start-up (cold, warm, node-local)
and its replicas' recorded start-ups, phase by phase; with --wait, first wait until one is recorded."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from apps.serving.models import InferenceService
from apps.serving.startup import panel


class Command(BaseCommand):
    help = "Print a service's modelled and recorded replica start-ups (TENANT/SERVICE)."

    def add_arguments(self, parser):
        parser.add_argument("service", help="TENANT/SERVICE, e.g. globex/mistral-7b-serverless")
        parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a recorded start-up")

    def handle(self, *args, service: str, wait: float = 0.0, **options):
        tenant, _, name = service.partition("/")
        if not tenant or not name:
            raise CommandError(f"service: give TENANT/SERVICE, not {service!r}")
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            found = InferenceService.objects.filter(tenant__slug=tenant, name=name).first()
            if found is None:
                raise CommandError(f"service: no service {service!r}")
            figures = panel(found)
            if figures is None:
                raise CommandError(f"service: {service} has no engine pool")
            if figures["recorded"] or time.monotonic() >= deadline:
                break
            time.sleep(5)
        self.stdout.write(f"{service} on {figures['gpu']}: {figures['sentence']}")
        for row in figures["recorded"]:
            source = row["cache_text"] if row.get("cache") == "none" else f"from {row['cache_text']}"
            self.stdout.write(f"  {row['pod']}: weights {source}, ready in {row['total_text']} "
                              f"({row['phases_text']})")
        if not figures["recorded"]:
            self.stdout.write("  no replica start-up recorded yet")
