"""The image's one entrypoint: `web`, `worker`, `beat`, `migrate`, `wait-for-migrations`, or `manage ...`.

The container image runs `python -m controlplane.entrypoint ROLE`; the Kubernetes manifests, docker-compose
and the Procfile-free production path all pick a role by argument, so the image never needs another
command line. Each role execs its server (gunicorn or celery) so that SIGTERM reaches it directly.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import django

from controlplane.tasknames import QUEUES

WEB_PORT = 8000
CELERY_APP = "controlplane"
ROLES = ("web", "worker", "beat", "gateway", "migrate", "wait-for-migrations", "manage")
# gunicorn's graceful timeout and the worker's longest task both fit in the pods' grace period
# (deploy/kubernetes/base: terminationGracePeriodSeconds).
WEB_GRACEFUL_TIMEOUT = 25


def web_argv(env: dict[str, str]) -> list[str]:
    """gunicorn with WEB_CONCURRENCY workers of WEB_THREADS threads: at most workers × threads requests run at
    once, each thread holding at most one database connection, so no client (however many connections it
    opens, with whatever token) can make the web tier hold more (docs/security.md: connection budget)."""
    return [
        "gunicorn", "controlplane.wsgi", "--bind", env.get("WEB_BIND", f"0.0.0.0:{WEB_PORT}"),
        "--workers", env.get("WEB_CONCURRENCY", "2"),  # access lines come from controlplane.logcontext
        "--threads", env.get("WEB_THREADS", "4"), "--worker-class", "gthread",
        "--graceful-timeout", str(WEB_GRACEFUL_TIMEOUT), "--worker-tmp-dir", tempfile.gettempdir(),
    ]


def worker_argv(env: dict[str, str]) -> list[str]:
    """celery worker on every queue, or on WORKER_QUEUES (comma-separated names, e.g. `whatif` for a worker of
    the what-if lab's replays alone, or the others for one that never runs them)."""
    prefix = env.get("CELERY_QUEUE_PREFIX", "")
    queues = [q.strip() for q in env.get("WORKER_QUEUES", "").split(",") if q.strip()] or list(QUEUES)
    unknown = sorted(set(queues) - set(QUEUES))
    if unknown:
        raise SystemExit(f"WORKER_QUEUES: unknown queue(s) {', '.join(unknown)} (known: {', '.join(QUEUES)})")
    return [
        "celery", "-A", CELERY_APP, "worker", "--loglevel", env.get("LOG_LEVEL", "INFO"),
        "--queues", ",".join(prefix + q for q in queues), "--concurrency", env.get("WORKER_CONCURRENCY", "2"),
    ]


def beat_argv(env: dict[str, str]) -> list[str]:
    # The schedule file is scratch state (the schedule itself lives in settings): an emptyDir in a pod.
    schedule = os.path.join(tempfile.gettempdir(), "celerybeat-schedule")
    return ["celery", "-A", CELERY_APP, "beat", "--loglevel", env.get("LOG_LEVEL", "INFO"), "--schedule", schedule]


def pending_migrations() -> list[str]:
    """Migrations not yet applied to the database, as `app.name` strings."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def wait_for_migrations(timeout: float, interval: float = 2.0) -> int:
    """Block until the database schema is current (the migrate Job has run); 1 after `timeout` seconds."""
    django.setup()
    deadline = time.monotonic() + timeout
    while True:
        try:
            pending = pending_migrations()
        except Exception as exc:  # the database may not be up yet
            pending, reason = None, f"database not reachable ({exc.__class__.__name__})"
        else:
            reason = f"{len(pending)} migrations pending, e.g. {pending[0]}" if pending else ""
        if pending == []:
            print("database schema is current", flush=True)
            return 0
        if time.monotonic() >= deadline:
            print(f"gave up waiting for migrations after {timeout:g}s: {reason}", file=sys.stderr, flush=True)
            return 1
        print(f"waiting for migrations: {reason}", flush=True)
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    role = argv[0] if argv else "web"
    if role not in ROLES:
        print(f"unknown role {role!r}; use one of: {', '.join(ROLES)}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if role in ("web", "worker", "beat"):
        command = {"web": web_argv, "worker": worker_argv, "beat": beat_argv}[role](env) + argv[1:]
        os.execvp(command[0], command)  # noqa: S606 (replaces this process: signals go straight to the server)
    if role == "gateway":
        # The gateway is its own ASGI process and imports no Django: its options follow the role.
        command = [sys.executable, "-m", "gateway", *argv[1:]]
        os.execvp(command[0], command)  # noqa: S606 (replaces this process: SIGTERM reaches the gateway's drain)
    if role == "wait-for-migrations":
        timeout = float(argv[1]) if len(argv) > 1 else 600.0
        return wait_for_migrations(timeout)
    from django.core.management import execute_from_command_line

    if role == "migrate":
        execute_from_command_line(["manage.py", "migrate", "--noinput", *argv[1:]])
    else:
        execute_from_command_line(["manage.py", *argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
