"""The web tier cannot be drained of database connections: gunicorn as production runs it, 500 concurrent
clients with bogus bearer tokens, and PostgreSQL's connection count for the database sampled throughout.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cp_harden \\
        .venv/bin/python -m controlplane.devenv test python bench/connections.py [--clients 500]

Runs against a throw-away `bench_<database>`; prints the peak count of the web's connections, the bound
(WEB_CONCURRENCY × WEB_THREADS) and how a valid token's requests fared during the flood. Exit 1 past the bound.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")


def get(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def web_connections(database: str, own_pid: int) -> int:
    """Connections to the database other than this script's own (which is idle in this query)."""
    from django.db import connection

    with connection.cursor() as cursor:
        # Client backends only, not this sampler's own or the main thread's (idle between the set-up and the end).
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
                       "AND pid <> pg_backend_pid() AND pid <> %s", [database, own_pid])
        return cursor.fetchone()[0]


def run(clients: int, workers: int, threads: int) -> int:
    from bench.common import free_port, setup_django, throwaway_database

    setup_django("bench/connections.py")
    from controlplane.entrypoint import web_argv

    with throwaway_database():
        from django.db import connection

        from tests.factories import MembershipFactory, TenantFactory, UserFactory, issue_token

        user = UserFactory(username="bench-owner")
        MembershipFactory(user=user, tenant=TenantFactory(slug="bench"), role="owner")
        _, valid = issue_token(user)
        database = connection.settings_dict["NAME"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            main_pid = cursor.fetchone()[0]
        port = free_port()
        env = {**os.environ, "DATABASE_URL": os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + database,
               "WEB_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(workers), "WEB_THREADS": str(threads),
               "API_ANON_THROTTLE_RATE": "1000000/min", "API_THROTTLE_RATE": "1000000/min"}
        server = subprocess.Popen(web_argv(env), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/api/v1/services/"
            deadline = time.monotonic() + 60
            while get(url, valid) != 200:
                if time.monotonic() > deadline:
                    raise SystemExit("gunicorn did not answer within 60 s")
                time.sleep(0.5)
            peak, stop = [0], threading.Event()

            def sample():
                from django.db import connection as own  # this thread's connection, closed when done

                while not stop.is_set():
                    peak[0] = max(peak[0], web_connections(database, main_pid))
                    time.sleep(0.1)
                own.close()

            answers: list[int] = []
            flood = [threading.Thread(target=lambda: answers.append(get(url, "cp_bogus_token")))
                     for _ in range(clients)]
            sampler = threading.Thread(target=sample)
            sampler.start()
            started = time.monotonic()
            for thread in flood:
                thread.start()
            valid_answers = [get(url, valid) for _ in range(5)]
            for thread in flood:
                thread.join()
            elapsed = time.monotonic() - started
            stop.set()
            sampler.join()
        finally:
            server.terminate()
            server.wait(30)
            connection.close()
    bound = workers * threads
    statuses = {code: answers.count(code) for code in sorted(set(answers))}
    print(f"{clients} bogus-token clients in {elapsed:.1f} s: answers {statuses}")
    print(f"valid token during the flood: {valid_answers}")
    print(f"peak web connections to the database: {peak[0]} (bound: {workers} workers x {threads} threads = {bound})")
    return 0 if peak[0] <= bound and all(code == 200 for code in valid_answers) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    raise SystemExit(run(args.clients, args.workers, args.threads))
