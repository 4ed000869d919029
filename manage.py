#!/usr/bin/env python3
"""Django's command-line entry point for the control plane.

With no configuration at all (neither DATABASE_URL nor SECRET_KEY, nor their `_FILE` forms) it uses the
same embedded local defaults as `make demo` (controlplane/devenv.py) and says so on stderr; with
SECRET_KEY set (production) it never falls back.
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from controlplane.devenv import fall_back_when_unconfigured

    fall_back_when_unconfigured("manage.py")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
