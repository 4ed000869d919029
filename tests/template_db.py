"""One migrated template database for every pytest-xdist worker.

Each worker needs a test database of its own (`test_<name>_gw<N>`). Migrating 65 migrations costs each worker
about 6 s of CPU, and on 2 cores four workers doing it at once take most of a minute. So the first worker to get
here migrates one template database, under a PostgreSQL advisory lock the others wait on, and every worker's test
database is then created from it (`CREATE DATABASE ... TEMPLATE`, Django's `TEST["TEMPLATE"]`); Django's migrate
on the copy finds nothing to apply.

The template's name carries a digest of every migration file and of Django's version, so a changed migration
makes a new template (older ones of the same test database are dropped); an unchanged one is reused by the next
run. A serial run (no xdist) does not use it: one migration is all it would save.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg import sql

from tests.database import url_of

ROOT = Path(__file__).resolve().parent.parent
LOCK_KEY = 0x7E57_DB  # the advisory lock the workers take while one of them builds the template


def digest() -> str:
    import django

    h = hashlib.sha256(django.get_version().encode())
    for path in sorted(ROOT.glob("apps/*/migrations/*.py")):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def template_for(settings_dict: dict) -> str:
    """Make sure a migrated template for this test database exists, and return its name."""
    test_name = settings_dict.get("TEST", {}).get("NAME") or f"test_{settings_dict['NAME']}"
    base = test_name.rsplit("_gw", 1)[0]  # the xdist suffix is added to TEST NAME before we are called
    prefix = f"{base}_tpl_"[:50]
    name = prefix + digest()
    admin = {**settings_dict, "NAME": "postgres"}
    with psycopg.connect(url_of(admin), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                build(conn, settings_dict, name)
            for (old,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                                       (prefix.replace("_", r"\_") + "%", name)).fetchall():
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(old)))
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return name


def build(conn: psycopg.Connection, settings_dict: dict, name: str) -> None:
    """Migrate a new database under a temporary name, then rename it: a run stopped half-way leaves no template
    that looks finished."""
    partial = name + "_partial"
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(partial)))
    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(partial)))
    env = {**os.environ, "DATABASE_URL": url_of({**settings_dict, "NAME": partial})}
    env.pop("DATABASE_URL_FILE", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0", "--no-input"],
                   cwd=ROOT, env=env, check=True)
    conn.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(partial), sql.Identifier(name)))
