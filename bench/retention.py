"""Benchmark: the telemetry retention pass over a full day of series of 2,000 services.

    .venv/bin/python -m controlplane.devenv test python bench/retention.py [--services 2000] [--hours 24]
        [--index btree|brin] [--pages-per-range 128]

Fills a throw-away database (`bench_<name>`) with what the scraper and the compact task write in
`--hours` hours for `--services` services: one raw row per service every scrape period and the
one-minute rollups the compact task adds every run, written in that order (generated inside PostgreSQL).
Then times the compact task's two halves (`apps.telemetry.retention.rollup` and `prune`) as the
periodic task meets them: a steady-state pass (one compact interval of rows past retention), a
catch-up pass (one hour past, e.g. after the task was down) and, after the catch-up's freed space has
been vacuumed and refilled by the next hour of writes (as it is in a table that runs for more than a
day), another steady-state pass. Prints rows, seconds and the backend's CPU seconds of each pass, the
plan of the delete (and what it reads after the refill), the size of the table and each index, and
the backend CPU of writing one scrape cycle's rows.

`--index brin` replaces the `(resolution, time)` B-tree with a BRIN index on `time` before measuring,
to compare (see docs/scale.md: the B-tree is kept, and why).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

AGE_INDEX = "telemetry_point_age_idx"
INSERT_CYCLES = 30


def write(cursor, table, start, seconds, period, compact_minutes, services) -> int:
    """Write `seconds` of rows from `start` (a whole minute) in the order they are written in production:
    every service's raw row of one scrape cycle, then the next cycle; the rollup of minute m lands with
    the first compact run at or after m + 2 minutes. Returns the rows written."""
    cursor.execute(
        f"INSERT INTO {table} (service_id, role, resolution, time, ttft_p95, kv_usage, running, ready_replicas) "
        "SELECT s, '', res, t, 0.2, 0.5, 3, 1 FROM ("
        "  SELECT step * 2 AS k, 0 AS res, %(start)s + make_interval(secs => step * %(period)s) AS t"
        "  FROM generate_series(0, %(steps)s - 1) AS step"
        "  UNION ALL"
        "  SELECT ceil((m + 2) / %(every)s::numeric) * %(every)s * 60 / %(period)s * 2 + 1, 60,"
        "         %(start)s + make_interval(mins => m)"
        "  FROM generate_series(0, %(minutes)s - 3) AS m"
        ") AS w, unnest(%(services)s::bigint[]) AS s ORDER BY k, s",
        {"start": start, "period": period, "steps": int(seconds // period), "every": compact_minutes,
         "minutes": int(seconds // 60), "services": services})
    return cursor.rowcount


def megabytes(size: int) -> str:
    return f"{size / 1e6:.0f} MB" if size >= 10e6 else f"{size / 1e3:.0f} kB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--index", choices=("btree", "brin"), default="btree",
                        help="the time index the passes use: the model's B-tree, or a BRIN index in its place")
    parser.add_argument("--pages-per-range", type=int, default=128, help="of the BRIN index (--index brin)")
    args = parser.parse_args()

    from bench.common import setup_django

    setup_django("bench/retention.py")
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    from apps.telemetry.models import SeriesPoint
    from apps.telemetry.retention import prune, rollup
    from bench.common import cpu_seconds, throwaway_database
    from tests.factories import InferenceServiceFactory

    period = settings.TELEMETRY_SCRAPE_SECONDS
    compact_seconds = settings.CELERY_BEAT_SCHEDULE["telemetry-compact"]["schedule"]
    table = SeriesPoint._meta.db_table
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    with throwaway_database():
        first = InferenceServiceFactory(name="svc-0")
        services = [first.pk] + [InferenceServiceFactory(name=f"svc-{i}", tenant=first.tenant, cluster=first.cluster,
                                                         model=first.model, runtime=first.runtime).pk
                                 for i in range(1, args.services)]
        now = timezone.now().replace(second=0, microsecond=0)
        start = now - timedelta(hours=args.hours)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            rows = write(cursor, table, start, args.hours * 3600, period, compact_seconds // 60, services)
            cursor.execute(f"VACUUM ANALYZE {table}")
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        print(f"{rows} rows ({args.services} services x {args.hours:g} h: raw every {period} s and one-minute "
              f"rollups) written in {time.perf_counter() - started:.0f} s", flush=True)
        with connection.cursor() as cursor:
            if args.index == "brin":
                t0 = time.perf_counter()
                cursor.execute(f"DROP INDEX {AGE_INDEX}")
                cursor.execute(f"CREATE INDEX {AGE_INDEX} ON {table} USING brin (time) "
                               f"WITH (pages_per_range = {args.pages_per_range})")
                cursor.execute(f"ANALYZE {table}")
                print(f"BRIN (time) pages_per_range={args.pages_per_range} built in {time.perf_counter() - t0:.1f} s "
                      f"in place of the (resolution, time) B-tree")
            cursor.execute("SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                           "WHERE indrelid = %s::regclass ORDER BY 1", [table])
            sizes = ", ".join(f"{name} {megabytes(size)}" for name, size in cursor.fetchall())
            cursor.execute("SELECT pg_relation_size(%s)", [table])
            print(f"table {megabytes(cursor.fetchone()[0])}; indexes: {sizes}")

            # One scrape cycle's rows through the scraper's own write path, after the newest row.
            newest = start + timedelta(hours=args.hours)
            walls, cpus = [], []
            for cycle in range(INSERT_CYCLES):
                at = newest + timedelta(seconds=period * cycle)
                points = [SeriesPoint(service_id=s, role="", time=at, ttft_p95=0.2, kv_usage=0.5, running=3,
                                      ready_replicas=1) for s in services]
                c0, t0 = cpu_seconds(backend), time.perf_counter()
                SeriesPoint.objects.bulk_create(points, ignore_conflicts=True)
                walls.append(time.perf_counter() - t0)
                cpus.append(cpu_seconds(backend) - c0)
            SeriesPoint.objects.filter(time__gte=newest).delete()
            cursor.execute(f"VACUUM {table}")
            print(f"one scrape cycle's {len(services)} rows (bulk_create, {INSERT_CYCLES} cycles): median "
                  f"{statistics.median(walls) * 1000:.0f} ms wall, mean {statistics.mean(cpus) * 1000:.0f} ms "
                  "database backend CPU")

            retention = timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
            cursor.execute(f"EXPLAIN DELETE FROM {table} WHERE resolution = 0 AND time < %s",
                           [start + timedelta(seconds=compact_seconds)])
            print("plan: " + " / ".join(line.strip() for (line,) in cursor.fetchall()))

            def compact(label: str, at) -> None:
                for name, step in (("rollup", rollup), ("prune", prune)):
                    c0, t0 = cpu_seconds(backend), time.perf_counter()
                    result = step(at)
                    wall, cpu = time.perf_counter() - t0, cpu_seconds(backend) - c0
                    done = f"{result} rows rolled up" if name == "rollup" else f"{result['raw']} raw rows deleted"
                    print(f"{label}, {name}: {done} in {wall:.2f} s ({cpu:.2f} s backend CPU)", flush=True)

            interval = timedelta(seconds=compact_seconds)
            compact(f"steady-state pass ({compact_seconds // 60} min past retention)", start + retention + interval)
            compact("catch-up pass (1 h past retention)", start + retention + timedelta(hours=1))
            # A table that runs for more than a day writes into the space retention freed.
            t0 = time.perf_counter()
            cursor.execute(f"VACUUM {table}")
            written = write(cursor, table, now, 3600, period, compact_seconds // 60, services)
            cursor.execute(f"ANALYZE {table}")
            print(f"vacuumed and wrote the next hour ({written} rows) into the freed space in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            compact(f"steady-state pass after the refill ({compact_seconds // 60} min past)",
                    start + retention + timedelta(hours=1) + interval)
            # What the next pass's delete reads now (rolled back): the blocks it visits for the rows it deletes.
            with transaction.atomic():
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) DELETE FROM {table} WHERE resolution = 0 "
                               "AND time < %s", [start + timedelta(hours=1) + 2 * interval])
                lines = [line.strip() for (line,) in cursor.fetchall()]
                transaction.set_rollback(True)
            shown = ("->", "Heap Blocks", "Rows Removed", "Buffers", "Execution")
            print("next pass's delete after the refill: " + " / ".join(x for x in lines if x.startswith(shown)))
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
