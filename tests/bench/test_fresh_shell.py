"""Every bench script runs as written (`.venv/bin/python bench/NAME.py`) in a fresh shell: nothing in the environment
but PATH and HOME, no DATABASE_URL, SECRET_KEY or keys. `--help` answers before any set-up; a run that needs Django
takes manage.py's local defaults (bench/common.py `setup_django`, controlplane/devenv.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A login shell's PATH on Debian, without the venv: the scripts are run with the venv's interpreter by path.
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def fresh_shell() -> dict[str, str]:
    return {"PATH": FRESH_PATH, "HOME": os.environ.get("HOME", "/root")}


def test_every_bench_script_is_found():
    # The ones the docs name, so that a change in how scripts are found cannot empty the list below.
    assert {"whatif.py", "api_list.py", "reconcile.py", "gateway.py", "profile_split.py"} <= set(SCRIPTS)
    assert "common.py" not in SCRIPTS  # a library of the scripts, not one


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bench_scripts_help_runs_in_a_fresh_shell(script):
    result = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=ROOT, env=fresh_shell(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: "), result.stdout
    assert "--help" in result.stdout
    assert result.stderr == ""  # no traceback, no warning, no fall-back line: --help sets nothing up
