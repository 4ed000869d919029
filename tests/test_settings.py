"""Settings are parsed strictly, and production settings pass Django's deployment checks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION_ENV = {
    "SECRET_KEY": "x7Jq2v9LmN4pR8sT1wY6zB3cF5hK0dG-production-grade-random-secret-value",
    "FIELD_ENCRYPTION_KEY": "q0m3WzG8sPcbfZ0lGkz2mN8W9tC3Yb5c4Yv1Qn7o3Ao=",
    "ALLOWED_HOSTS": "controlplane.example.com",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "SECRET_KEY_FILE"}}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
        capture_output=True, text=True, timeout=120,
    )


def test_production_settings_pass_the_deployment_checks():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr + result.stdout


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DEBUG", "maybe", "DEBUG='maybe' is not a boolean"),
        ("DB_CONN_MAX_AGE", "sixty", "DB_CONN_MAX_AGE='sixty' is not an integer"),
        ("VLLM_ROUTER_IMAGE", "lmcache/lmstack-router:latest", "VLLM_ROUTER_IMAGE='lmcache/lmstack-router:latest' is "
                                                               "not a pinned image"),
        ("EPP_IMAGE", "registry.k8s.io/epp", "EPP_IMAGE='registry.k8s.io/epp' is not a pinned image"),
        ("MODEL_FETCH_IMAGE", "amazon/../aws-cli:2", "MODEL_FETCH_IMAGE='amazon/../aws-cli:2' is not a pinned image"),
    ],
)
def test_a_malformed_variable_stops_start_up_naming_it(variable, value, message):
    result = manage("check", **PRODUCTION_ENV, **{variable: value})
    assert result.returncode != 0
    assert message in result.stderr


def test_secrets_can_come_from_files(tmp_path):
    key_file = tmp_path / "secret"
    key_file.write_text(PRODUCTION_ENV["SECRET_KEY"] + "\n")
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECRET_KEY"}
    result = manage("check", "--deploy", "--fail-level", "WARNING", SECRET_KEY_FILE=str(key_file), **env)
    assert result.returncode == 0, result.stderr


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECRET_KEY"}
    result = manage("check", **env)
    assert result.returncode != 0
    assert "Set the SECRET_KEY environment variable" in result.stderr


def bare(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`manage.py` as typed into a fresh shell: nothing in the environment but PATH and HOME."""
    base = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
        capture_output=True, text=True, timeout=180,
    )


def test_manage_py_in_a_bare_shell_uses_the_local_defaults_and_says_so_in_one_line():
    result = bare("check")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("manage.py: DATABASE_URL and SECRET_KEY are unset"), lines


def test_manage_py_never_falls_back_when_a_secret_key_is_set():
    result = bare("check", SECRET_KEY=PRODUCTION_ENV["SECRET_KEY"])
    assert result.returncode != 0
    assert "local defaults" not in result.stderr
    assert "Set the " in result.stderr  # names the missing setting instead
