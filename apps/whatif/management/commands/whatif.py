"""`manage.py whatif --service TENANT/NAME [--trace FILE --format F] [--alternatives FILE.json | --search] [--json]`.

With `--search`, the inverse question (`apps.whatif.search`): `--json` then prints one line, `{"front": [{"config",
"gpu_hours", "slo_attainment", "itl_slo_attainment", …}], "chosen", "reason", "wall_s", …}`."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.serving.models import InferenceService
from apps.whatif.lab import LoadError, recorded_load, run_whatif, trace_load
from apps.whatif.scenarios import ScenarioError
from apps.whatif.search import search
from capacity.traces import FORMATS, TraceError


class Command(BaseCommand):
    help = ("Replay a service's load (its recorded traffic, or an uploaded trace) against its current "
            "configuration and alternatives on the simulated engines, and print what each would cost and meet.")

    def add_arguments(self, parser):
        parser.add_argument("--service", required=True, metavar="TENANT/NAME")
        parser.add_argument("--trace", metavar="FILE", help="A trace file; without it, the service's recorded load.")
        parser.add_argument("--format", choices=FORMATS, default="azure", help="The trace's format (default azure).")
        parser.add_argument("--alternatives", metavar="FILE.json",
                            help="A JSON list of up to 8 alternatives; without it, the lab's default three.")
        parser.add_argument("--search", action="store_true",
                            help="Search for the cheapest configurations meeting the SLO (a Pareto front).")
        parser.add_argument("--json", action="store_true", dest="as_json", help="One JSON object and nothing else.")

    def handle(self, *args, service: str, trace: str | None, format: str, alternatives: str | None,
               search: bool, as_json: bool, **options):
        target = service_named(service)
        try:
            load = trace_load(_read(trace), format) if trace else recorded_load(target)
        except TraceError as exc:
            raise CommandError(f"{trace}: bad trace:\n  " + "\n  ".join(exc.problems)) from None
        except LoadError as exc:
            raise CommandError(str(exc)) from None
        if search:
            if alternatives:
                raise CommandError("--search and --alternatives cannot be given together.")
            return self._search(target, load, as_json)
        alts = None
        if alternatives:
            try:
                alts = json.loads(_read(alternatives))
            except ValueError as exc:
                raise CommandError(f"{alternatives} is not JSON: {exc}") from None
        try:
            result = run_whatif(target, load, alts)
        except ScenarioError as exc:
            raise CommandError("Alternatives refused:\n  " + "\n  ".join(exc.problems)) from None
        if as_json:
            scenarios = [{k: s[k] for k in s if k != "timeline"} for s in result["scenarios"]]
            self.stdout.write(json.dumps({**result, "scenarios": scenarios}, separators=(",", ":")))
        else:
            self._table(result)
        if result["stopped"]:
            raise CommandError(result["stopped"])

    def _search(self, target, load, as_json: bool) -> None:
        try:
            result = search(target, load)
        except (ScenarioError, LoadError) as exc:
            raise CommandError(str(exc)) from None
        rows = [{k: v for k, v in r.items() if k not in ("timeline", "changes")} for r in result["front"]]
        chosen = result["chosen"] and next(r for r in rows if r["name"] == result["chosen"]["name"])
        current = result["current"] and {k: v for k, v in result["current"].items() if k != "timeline"}
        if as_json:
            self.stdout.write(json.dumps({**result, "front": rows, "chosen": chosen, "current": current},
                                         separators=(",", ":")))
            return
        self.stdout.write(f"{result['service']}: {result['requests']} requests over {result['duration_s']:.0f} s; "
                          f"{result['replayed']} configurations replayed, {len(result['pruned'])} pruned by the "
                          f"planner, in {result['wall_s']:.1f} s ({result['cpu_s']:.1f} s CPU)")
        self.stdout.write(f"{'configuration':<60}{'GPU-h':>8}{'TTFT':>8}{'ITL':>8}")
        for r in ([current] if current else []) + rows:
            mark = " *" if chosen and r["name"] == chosen["name"] else ""
            self.stdout.write(f"{r['name']:<60}{r['gpu_hours']:>8.2f}{r['slo_attainment']:>8.1%}"
                              f"{r['itl_slo_attainment']:>8.1%}{mark}")
        self.stdout.write("* chosen: the cheapest meeting the SLO" if chosen else result["reason"])
        if result["stopped"]:
            self.stdout.write(result["stopped"])

    def _table(self, result: dict) -> None:
        self.stdout.write(f"{result['service']}: {result['requests']} requests over {result['duration_s']:.0f} s "
                          f"({result['source']}), replayed in {result['wall_s']:.1f} s")
        self.stdout.write(f"{'scenario':<28}{'GPU-h':>8}{'TTFT p50':>10}{'TTFT p95':>10}{'ITL p95':>9}"
                          f"{'SLO':>8}{'peak':>6}")
        for s in result["scenarios"]:
            self.stdout.write(f"{s['name'][:27]:<28}{s['gpu_hours']:>8.2f}{_s(s['ttft_p50_s']):>10}"
                              f"{_s(s['ttft_p95_s']):>10}{_s(s['itl_p95_s']):>9}{s['slo_attainment']:>8.1%}"
                              f"{s['peak_replicas']:>6}")


def service_named(spec: str) -> InferenceService:
    """The service `TENANT/NAME`, or a CommandError naming what was given."""
    tenant, _, name = spec.partition("/")
    target = InferenceService.objects.with_related().filter(tenant__slug=tenant, name=name).first() if name else None
    if target is None:
        raise CommandError(f"No service {spec!r} (give it as TENANT/NAME).")
    return target


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror}") from None


def _s(value) -> str:
    return "-" if value is None else f"{value:.2f}s"
