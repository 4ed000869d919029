"""`manage.py autoscale_replay FILE [--json]`: the built-in autoscaler's decisions over a scenario."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from apps.autoscaling.replay import replay
from apps.serving.scaling_policy import PolicyError


class Command(BaseCommand):
    help = ("Run the built-in autoscaler's decision function over a JSON scenario ({policy, steps}) and print "
            "one result per step (t, desired, reason, ...). '-' reads standard input.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="Scenario JSON file, or - for standard input.")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="One JSON object per line and nothing else.")

    def handle(self, *args, file: str, as_json: bool = False, **options):
        try:
            text = sys.stdin.read() if file == "-" else open(file, encoding="utf-8").read()  # noqa: SIM115
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}") from None
        try:
            scenario = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{file} is not JSON: {exc}") from None
        try:
            results = replay(scenario)
        except PolicyError as exc:
            raise CommandError("Invalid scenario:\n  " + "\n  ".join(exc.problems)) from None
        for result in results:
            if as_json:
                self.stdout.write(json.dumps(result, separators=(",", ":")))
            else:
                self.stdout.write(f"t={result['t']:g}s {result['current']} → {result['desired']} "
                                  f"[{result['rule']}] {result['reason']}")
