"""Benchmark: the telemetry retention pass over a full day of raw series of 2,000 services.

    .venv/bin/python -m controlplane.devenv test python bench/retention.py [--services 2000] [--hours 24]

Fills a throw-away database (`bench_<name>`) with what the scraper writes in `--hours` hours for
`--services` services (one raw row per service every 5 s, written in time order as the scraper does,
generated inside PostgreSQL), then times the retention pass (`apps.telemetry.retention.prune`) as
the periodic task meets it: a steady-state pass (one minute of rows past retention) and a catch-up
pass (one hour past, e.g. after the task was down). Prints rows deleted, seconds, the plan PostgreSQL
chose and the size of the table and each index.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

PERIOD_SECONDS = 5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--hours", type=float, default=24)
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from apps.telemetry.models import SeriesPoint
    from apps.telemetry.retention import prune
    from bench.common import throwaway_database
    from tests.factories import InferenceServiceFactory

    with throwaway_database():
        first = InferenceServiceFactory(name="svc-0")
        services = [first.pk] + [InferenceServiceFactory(name=f"svc-{i}", tenant=first.tenant, cluster=first.cluster,
                                                         model=first.model, runtime=first.runtime).pk
                                 for i in range(1, args.services)]
        now = timezone.now().replace(microsecond=0)
        start = now - timedelta(hours=args.hours)
        steps = int(args.hours * 3600 / PERIOD_SECONDS)
        table = SeriesPoint._meta.db_table
        started = time.perf_counter()
        with connection.cursor() as cursor:
            # Time-major order, as cycles write: every service's row of one cycle, then the next cycle.
            cursor.execute(
                f"INSERT INTO {table} (service_id, role, resolution, time, ttft_p95, kv_usage, running, "
                "ready_replicas) SELECT s, '', 0, %s + make_interval(secs => step * %s), 0.2, 0.5, 3, 1 "
                "FROM generate_series(0, %s - 1) AS step, unnest(%s::bigint[]) AS s ORDER BY step, s",
                [start, PERIOD_SECONDS, steps, services])
            rows = cursor.rowcount
            cursor.execute(f"VACUUM ANALYZE {table}")
        print(f"{rows} raw rows ({args.services} services x {args.hours:g} h every {PERIOD_SECONDS} s) written in "
              f"{time.perf_counter() - started:.0f} s")
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                           "WHERE indrelid = %s::regclass ORDER BY 1", [table])
            sizes = ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in cursor.fetchall())
            cursor.execute("SELECT pg_relation_size(%s)", [table])
            print(f"table {cursor.fetchone()[0] / 1e6:.0f} MB; indexes: {sizes}")
            retention = timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
            cutoff = start + timedelta(minutes=1)
            cursor.execute(f"EXPLAIN DELETE FROM {table} WHERE resolution = 0 AND time < %s",
                           [cutoff])
            print("plan: " + " / ".join(line for (line,) in cursor.fetchall()))
        for label, past in (("steady-state pass (1 min past retention)", timedelta(minutes=1)),
                            ("catch-up pass (1 h past retention)", timedelta(hours=1))):
            at = start + retention + past
            t0 = time.perf_counter()
            counts = prune(at)
            print(f"{label}: {counts['raw']} rows deleted in {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
