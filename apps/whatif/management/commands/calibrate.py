"""`manage.py calibrate --service TENANT/NAME [--minutes M] [--apply] [--json]`: fit the lab's step-time
coefficients to the service's observed latencies (`apps.whatif.fit`)."""

from __future__ import annotations

import json
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from apps.core.choices import AuditVia
from apps.whatif.calibration import fit_engine
from apps.whatif.fit import FitError
from apps.whatif.lab import LoadError
from apps.whatif.management.commands.whatif import service_named
from apps.whatif.scenarios import ScenarioError


class Command(BaseCommand):
    help = ("Fit the what-if lab's engine coefficients (prefill FLOP/s fraction, decode bandwidth fraction, step "
            "overhead) to a service's stored latencies, and with --apply replay the service with them.")

    def add_arguments(self, parser):
        parser.add_argument("--service", required=True, metavar="TENANT/NAME")
        parser.add_argument("--minutes", type=int, default=60, help="The window read, ending now (default 60).")
        parser.add_argument("--apply", action="store_true", help="The lab replays the service with the fit.")
        parser.add_argument("--json", action="store_true", dest="as_json", help="One JSON object and nothing else.")

    def handle(self, *args, service: str, minutes: int, apply: bool, as_json: bool, **options):
        if not 1 <= minutes <= 24 * 60:
            raise CommandError("--minutes must be from 1 to 1440.")
        target = service_named(service)
        try:
            row = fit_engine(target, timedelta(minutes=minutes), apply=apply, via=AuditVia.COMMAND)
        except (FitError, LoadError, ScenarioError) as exc:
            raise CommandError(f"{service}: cannot fit: {exc}") from None
        out = {"service": service, "coefficients": row.coefficients, **row.figures, "applied": row.applied}
        if as_json:
            self.stdout.write(json.dumps(out, separators=(",", ":")))
            return
        c = row.coefficients
        self.stdout.write(
            f"{service}: decode bandwidth fraction {c['decode_bandwidth_fraction']}, step overhead "
            f"{c['step_overhead_ms']} ms ({row.figures['decode_samples']} intervals, ITL error "
            f"{row.figures['itl_error_pct']} %); prefill FLOP/s fraction "
            f"{c.get('prefill_flops_fraction', 'not fitted')} ({row.figures['prefill_samples']} intervals, TTFT "
            f"error {row.figures['ttft_error_pct']} %). {'Applied to the lab.' if apply else 'Not applied (--apply).'}")
