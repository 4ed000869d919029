"""`manage.py render TENANT/SERVICE [--format yaml|json]` and `manage.py render --all`: print the
Kubernetes objects a service renders to (GitOps export), exactly what the reconciler applies."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from apps.serving.models import InferenceService
from apps.serving.rendering import render_service, spec_from_service
from apps.serving.rendering.output import to_json, to_yaml


class Command(BaseCommand):
    help = "Print the Kubernetes objects of one service (TENANT/SERVICE) or of every service (--all)."

    def add_arguments(self, parser):
        parser.add_argument("service", nargs="?", help="TENANT/SERVICE, e.g. acme/chat")
        parser.add_argument("--all", dest="every", action="store_true", help="every service that is not being deleted")
        parser.add_argument("--format", choices=("yaml", "json"), default="yaml")

    def handle(self, *args, service=None, every=False, format="yaml", **options):
        if bool(service) == bool(every):
            raise CommandError("give either TENANT/SERVICE or --all")
        if every:
            services = list(
                InferenceService.objects.filter(deletion_requested_at__isnull=True)
                .select_related("tenant")
                .order_by("tenant__slug", "name")
            )
        else:
            services = [self._one(service)]
        objects: list[dict] = []
        seen: set[tuple] = set()
        failed = []
        for svc in services:
            try:
                rendered = render_service(spec_from_service(svc))
            except ValueError as exc:  # RenderError, invalid stored settings
                failed.append(f"{svc.tenant.slug}/{svc.name}: {exc}")
                continue
            for obj in rendered:
                # Tenant-level objects (Namespace, quota, model caches) appear once per export.
                key = (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
                if key not in seen:
                    seen.add(key)
                    objects.append(obj)
        if objects or not failed:
            self.stdout.write(to_json(objects) if format == "json" else to_yaml(objects), ending="")
            if format == "json":
                self.stdout.write("")
        if failed:
            raise CommandError("could not render " + "; ".join(failed))

    def _one(self, ref: str) -> InferenceService:
        tenant, sep, name = ref.partition("/")
        if not sep or not tenant or not name:
            raise CommandError(f"expected TENANT/SERVICE, got {ref!r}")
        try:
            return InferenceService.objects.select_related("tenant").get(tenant__slug=tenant, name=name)
        except InferenceService.DoesNotExist:
            raise CommandError(f"no service {name!r} in tenant {tenant!r}") from None
