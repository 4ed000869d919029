"""Where a reconcile pass's time goes, from py-spy's collapsed stacks of the Celery workers.

    py-spy record --pid WORKER_PID --subprocesses --idle --threads --format raw -o worker.txt   (during a run)
    python bench/profile_split.py worker.txt [more.txt ...]

Counts the samples of each worker process's main thread (the one running tasks, `--idle` so that its
waits count as wall time) and splits those inside a pass (`workers.reconcile.reconcile`) into: the
database (Django's ORM, psycopg), rendering the service's objects, applies (server-side applies and the
shared objects' checks, Kube.each's threads waited on), reads of the service's objects (watch caches or
the wire), status reads (pods, events, logs after the objects are converged) and the rest (status and
drift computation, logging, JSON). Separately: the share of the pass time spent waiting on the API server
(a socket read or Kube.each's futures at the top of the stack), and how busy the main threads were.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

PASS = re.compile(r"(^|;)reconcile \([^)]*workers/reconcile\.py")
MAIN = re.compile(r"(^|;)workloop \([^)]*billiard/pool\.py")
KUBE_CALL = re.compile(r";(list|get|each|previous_log|apply) \([^)]*workers/kube\.py")
WAITS = ("readinto (socket.py", "recv_into", "_read_status (http/client.py", "wait (threading.py",
         "select (selectors.py", "poll (", "_wait_for_tstate_lock")
CATEGORIES = ("database", "rendering", "applies", "reads of the service's objects", "status reads", "other")


def category(stack: str) -> str:
    if "django/db/" in stack or "psycopg" in stack:
        return "database"
    if "apps/serving/rendering/" in stack:
        return "rendering"
    if "_sync (" in stack and "workers/kube.py" in stack:
        if re.search(r";(each|apply|_converge) \([^)]*workers/kube\.py", stack):
            return "applies"
        return "reads of the service's objects"
    if KUBE_CALL.search(stack) or "workers/kubecache.py" in stack:
        return "status reads"
    return "other"


def split(lines) -> tuple[Counter, int, int, int]:
    """(samples per category, samples waiting on the API server, pass samples, main-thread samples)."""
    per, waiting, passes, main = Counter(), 0, 0, 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit() or not MAIN.search(stack):
            continue
        n = int(count)
        main += n
        if not PASS.search(stack):
            continue
        passes += n
        kind = category(stack)
        per[kind] += n
        leaf = stack.rsplit(";", 1)[-1]
        if kind != "database" and any(w in leaf for w in WAITS):
            waiting += n
    return per, waiting, passes, main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stacks", nargs="+", help="py-spy's raw (collapsed) stacks of the Celery workers")
    lines = []
    for path in parser.parse_args().stacks:
        with open(path) as handle:
            lines.extend(handle)
    per, waiting, passes, main_samples = split(lines)
    if not passes:
        print("no samples inside a reconcile pass")
        return 1
    print(f"worker main threads busy in passes: {passes / max(main_samples, 1):.0%} of {main_samples} samples")
    print("pass time: " + ", ".join(f"{name} {per[name] / passes:.0%}" for name in CATEGORIES))
    print(f"pass time waiting on the API server (a socket read or Kube.each's futures): {waiting / passes:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
