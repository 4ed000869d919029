"""`manage.py reconcile [--all | TENANT/SERVICE]`: run reconcile passes synchronously, in this process."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from apps.serving.choices import ReconcileResult
from apps.serving.models import InferenceService
from workers.kubeerrors import ClusterError
from workers.reconcile import reconcile


class Command(BaseCommand):
    help = "Reconcile one service (TENANT/SERVICE) or every service (--all) once, synchronously."

    def add_arguments(self, parser):
        parser.add_argument("target", nargs="?", help="TENANT/SERVICE")
        parser.add_argument("--all", action="store_true", help="reconcile every service")

    def handle(self, *args, target=None, all=False, **options):
        if bool(target) == bool(all):
            raise CommandError("Give exactly one of TENANT/SERVICE or --all.")
        if all:
            ids = list(InferenceService.objects.order_by("pk").values_list("pk", flat=True))
        else:
            tenant, _, name = target.partition("/")
            if not tenant or not name:
                raise CommandError(f"{target!r} is not TENANT/SERVICE.")
            found = InferenceService.objects.filter(tenant__slug=tenant, name=name).values_list("pk", flat=True)
            if not found:
                raise CommandError(f"No service {target!r}.")
            ids = list(found)
        failures = 0
        for pk in ids:
            try:
                outcome = reconcile(pk)
            except ClusterError as exc:
                failures += 1
                self.stderr.write(f"service {pk}: {exc.message}")
                continue
            self.stdout.write(
                f"service {pk}: {outcome.result} (applied {outcome.applied}, pruned {outcome.pruned}, "
                f"{outcome.duration_s:.2f}s){' — ' + outcome.message if outcome.message else ''}"
            )
            failures += outcome.result == ReconcileResult.FAILED
        if failures:
            raise CommandError(f"{failures} of {len(ids)} services failed to reconcile.")
