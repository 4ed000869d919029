"""`manage.py seed_gpu_prices`: example prices per GPU-hour for the demo's cost column, where none is set.

Illustrative on-demand cloud prices (USD per GPU-hour, rounded), not a quote: operators replace them with
their own in the admin (What-if lab → GPU prices). A type that already has a price keeps it; running the
command twice changes nothing."""

from __future__ import annotations

from decimal import Decimal

from django.core.management.base import BaseCommand

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.whatif.models import GpuPrice

EXAMPLE_PRICES = {"h100-sxm-80gb": "4.00", "h100-pcie-80gb": "3.50", "a100-sxm-80gb": "2.50", "l40s-48gb": "1.20",
                  "l4-24gb": "0.80", "rtx4090-24gb": "0.50", "b200-180gb": "6.00"}


class Command(BaseCommand):
    help = "Set example GPU prices (USD per GPU-hour) for the what-if lab's costs where none is set."

    def handle(self, *args, **options):
        made = 0
        for gpu, price in EXAMPLE_PRICES.items():
            row, created = GpuPrice.objects.get_or_create(gpu_type=gpu, defaults={"usd_per_gpu_hour": Decimal(price)})
            if created:
                record_change(actor=None, obj=row, action=AuditAction.CREATE, via=AuditVia.COMMAND,
                              actor_label="command:seed_gpu_prices")
                made += 1
        self.stdout.write(f"{made} GPU price(s) set; {len(EXAMPLE_PRICES) - made} kept as they were.")
