"""Set-up shared by the bench scripts: a free port, a database of their own, CPU clocks."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def setup_django(program: str) -> None:
    """Set up Django for a bench script: in a fresh shell (no DATABASE_URL, no SECRET_KEY) with the local defaults
    `manage.py` uses, said in one line on stderr (controlplane/devenv.py); as configured otherwise."""
    import os

    import django

    from controlplane.devenv import fall_back_when_unconfigured

    fall_back_when_unconfigured(program)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()


def free_port() -> int:
    """A loopback port free at the moment of asking (bound, then released for a server to take)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def throwaway_database(prefix: str = "bench_") -> Iterator[None]:
    """Run the block against a fresh `<prefix><database>` database, dropped afterwards even on failure.

    The `bench_` default keeps a concurrent pytest run (which uses `test_<database>`) from being clobbered.
    """
    from django.db import connection

    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{prefix}{old_name}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used so far (Linux `/proc/<pid>/stat`)."""
    import os

    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """CPU seconds of every live PostgreSQL process on this machine (backends come and go: compare two
    readings only as a rough share, and only when nothing else uses the server)."""
    import os

    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if handle.read().strip() not in ("postgres", "postmaster"):
                    continue
            total += cpu_seconds(int(entry))
        except OSError:
            continue
    return total


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a live process and its live descendants (a prefork Celery worker and its children)."""
    total = 0.0
    for member in process_tree(pid):
        try:
            total += cpu_seconds(member)
        except OSError:
            continue
    return total


def rss_megabytes(pid: int) -> float:
    """Resident memory of a live process (VmRSS), in MB; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def process_tree(pid: int) -> set[int]:
    """A live process and its live descendants."""
    import os

    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def _minor(version: dict) -> int:
    """The minor version of a `/version` answer; vendors append '+' ("32+"), so only the digits count."""
    return int("".join(ch for ch in str(version.get("minor", "")) if ch.isdigit()) or -1)


def kubectl_skew_problem(client: dict, server: dict) -> str | None:
    """Why this kubectl may not be compared against this API server, or None.

    kubectl's version skew policy supports a client within one minor version of kube-apiserver, older or
    newer; an older one measures a different program (Debian's 1.20 applies far more slowly than 1.32)."""
    if str(client.get("major")) != str(server.get("major")):
        return (f"kubectl {client.get('gitVersion')} and the API server {server.get('gitVersion')} "
                "differ in major version")
    if _minor(client) < _minor(server) - 1:
        return (f"kubectl {client.get('gitVersion')} is older than the API server {server.get('gitVersion')} minus one "
                f"minor version, outside kubectl's skew policy; put kubectl 1.{_minor(server) - 1} or newer on PATH")
    return None


def kubectl_against(server_url: str) -> tuple[str, str]:
    """The kubectl on PATH and its version, checked against the API server at `server_url`.

    Raises SystemExit naming the reason when there is no kubectl or it is outside the skew policy."""
    import json
    import shutil
    import subprocess
    from urllib.request import urlopen

    path = shutil.which("kubectl")
    if not path:
        raise SystemExit("kubectl not on PATH: no comparison")
    answer = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True)
    client = json.loads(answer.stdout)["clientVersion"]
    with urlopen(f"{server_url}/version", timeout=10) as response:
        server = json.load(response)
    problem = kubectl_skew_problem(client, server)
    if problem:
        raise SystemExit(problem)
    return path, client["gitVersion"]
