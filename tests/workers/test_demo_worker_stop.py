"""`make demo`'s worker stops on Ctrl-C within honcho's grace, with no ERROR line.

The worker is started as honcho starts it: the Procfile's command line through `sh -c`, in a session of
its own, with the demo's default folder broker (here in a fresh folder). Ctrl-C in honcho sends SIGTERM to
that process group (`os.killpg`), and SIGKILL after `honcho.manager.KILL_WAIT` seconds; a Ctrl-C in a
terminal running the worker alone sends SIGINT to its group. Either must end in a warm shutdown before the
SIGKILL would come, and logging no ERROR line (a prefork pool's children, hit by the same group signal,
died logging "Process 'ForkPoolWorker-1' … exited with 'signal 15 (SIGTERM)'" as ERROR lines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from honcho.manager import KILL_WAIT

from tests.polling import wait_for
from tests.workers.conftest import ROOT

pytestmark = pytest.mark.integration


def procfile_command(name: str) -> str:
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name} in the Procfile")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["honcho-sigterm", "terminal-sigint"])
def test_the_demo_worker_stops_within_the_grace_without_error_lines(tmp_path, sig):
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}  # the demo's default broker
    env |= {"DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    worker = subprocess.Popen(procfile_command("worker"), shell=True, start_new_session=True, cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        wait_for(lambda: lines.append(worker.stdout.readline()) or "ready." in lines[-1] or worker.poll() is not None,
                 timeout=120, interval=0, message="the worker to be ready")
        assert worker.poll() is None, "".join(lines)
        os.killpg(worker.pid, sig)
        rest, _ = worker.communicate(timeout=KILL_WAIT)  # honcho would SIGKILL the group after this long
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
    output = "".join(lines) + rest
    assert "Warm shutdown" in output, output
    assert not [line for line in output.splitlines() if "ERROR" in line], output
    # Celery re-raises the signal once it has shut down (-sig), unless its main loop saw the stop flag first: it
    # then exits with the flag's code, 0 after SIGTERM and EX_FAILURE (1) after SIGINT, which celery's own
    # Ctrl-C handler sets (celery.apps.worker.install_worker_int_handler). Which of the two comes first is timing.
    assert worker.returncode in ((0, -sig) if sig == signal.SIGTERM else (1, -sig)), output
