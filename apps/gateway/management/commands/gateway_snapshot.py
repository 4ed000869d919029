"""Write the gateway's routing snapshot once, or every --every seconds."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand

from apps.gateway.snapshot import write_snapshot


class Command(BaseCommand):
    help = "Write the gateway's routing snapshot (JSON) to --out; with --every, keep rewriting it."

    def add_arguments(self, parser):
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--every", type=float, default=0.0, help="Seconds between rewrites; 0 writes once.")

    def handle(self, *args, out: Path, every: float, **options):
        while True:
            snapshot = write_snapshot(out)
            self.stdout.write(f"{len(snapshot['keys'])} keys, {len(snapshot['services'])} services -> {out}")
            if every <= 0:
                return
            time.sleep(every)
