"""The image and the manifests agree (Docker is not available here, so this is the review that keeps them
so): the Dockerfile's user, port and entrypoint are what deploy/kubernetes and docker-compose expect."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from controlplane import entrypoint
from tests.deploy.manifests import OVERLAYS, ROOT, containers, find, pod_specs, render


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (instruction, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), args.strip()))
    return stages


def final(instruction: str) -> list[str]:
    return [args for ins, args in dockerfile_stages()[-1] if ins == instruction]


def test_the_image_is_multi_stage_on_a_pinned_base():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    for stage in stages:
        base = stage[0][1].split()[0]
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base


def test_dependencies_come_from_exact_pins_and_static_files_are_collected():
    build = " ".join(args for ins, args in dockerfile_stages()[0] if ins == "RUN")
    assert "pip install ." in build and "collectstatic --noinput" in build
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[\w.]+", requirement), requirement


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_image_user_is_the_numeric_non_root_user_every_pod_runs_as(overlay):
    (user,) = final("USER")
    uid, gid = (int(part) for part in user.split(":"))
    assert uid != 0 and gid != 0
    for where, spec in pod_specs(render(overlay)).items():
        ctx = spec["securityContext"]
        assert (ctx["runAsUser"], ctx["runAsGroup"]) == (uid, gid), where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_exposed_port_is_the_web_container_port_and_gunicorn_binds_it(overlay):
    (exposed,) = final("EXPOSE")
    web = find(render(overlay), "Deployment", "controlplane-web")["spec"]["template"]["spec"]["containers"][0]
    assert web["ports"] == [{"name": "http", "containerPort": int(exposed), "protocol": "TCP"}]
    assert f"0.0.0.0:{exposed}" in entrypoint.web_argv({})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_runs_the_image_entrypoint_with_a_role_it_knows(overlay):
    (entry,) = final("ENTRYPOINT")
    assert json.loads(entry) == ["python", "-m", "controlplane.entrypoint"]
    for where, spec in pod_specs(render(overlay)).items():
        for container in containers(spec):
            assert "command" not in container, where  # the image's entrypoint stays in charge
            assert container["image"].split(":")[0].endswith("controlplane"), where
            assert container["args"][0] in entrypoint.ROLES, where


def test_the_worker_liveness_probe_pings_the_celery_app_the_entrypoint_starts():
    worker = find(render("production"), "Deployment", "controlplane-worker")["spec"]["template"]["spec"]
    probe = " ".join(worker["containers"][0]["livenessProbe"]["exec"]["command"])
    assert f"celery -A {entrypoint.CELERY_APP} inspect ping" in probe
    assert entrypoint.worker_argv({})[:4] == ["celery", "-A", entrypoint.CELERY_APP, "worker"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_web_grace_period_outlasts_gunicorns_graceful_timeout(overlay):
    web = find(render(overlay), "Deployment", "controlplane-web")["spec"]["template"]["spec"]
    assert web["terminationGracePeriodSeconds"] > entrypoint.WEB_GRACEFUL_TIMEOUT
    argv = entrypoint.web_argv({})
    assert argv[argv.index("--graceful-timeout") + 1] == str(entrypoint.WEB_GRACEFUL_TIMEOUT)


def test_compose_runs_the_same_image_with_the_same_roles():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    apps = {name: svc for name, svc in compose["services"].items() if svc.get("build") == "."}
    assert set(apps) == {"kubesim", "migrate", "web", "worker", "beat", "gateway-snapshot", "gateway"}
    assert {svc["image"] for svc in apps.values()} == {"controlplane:local"}
    for name in ("web", "worker", "beat"):
        assert apps[name]["command"] == [name]
    assert "controlplane.entrypoint migrate" in " ".join(apps["migrate"]["entrypoint"])
    assert apps["gateway-snapshot"]["command"][:2] == ["manage", "gateway_snapshot"]
    assert apps["gateway"]["command"][0] == "gateway"  # the image's entrypoint execs `python -m gateway`
    # The gateway reaches kubesim's pods as it would pod IPs: it shares kubesim's network, where they live on
    # loopback addresses, and its usage spool outlives a restart.
    assert apps["gateway"]["network_mode"] == "service:kubesim" and "ports" not in apps["gateway"]
    assert "loopback" in apps["kubesim"]["entrypoint"] and "8080:8080" in apps["kubesim"]["ports"]
    assert "--spool-dir" in apps["gateway"]["command"] and "gateway-spool:/spool" in apps["gateway"]["volumes"]


def test_an_unknown_role_is_refused_with_the_list_of_roles():
    out = subprocess.run([sys.executable, "-m", "controlplane.entrypoint", "serve"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown role 'serve'; use one of: web, worker, beat, gateway, migrate, wait-for-migrations, manage" in out.stderr


def test_wait_for_migrations_returns_at_once_when_the_schema_is_current(db):
    assert entrypoint.pending_migrations() == []
    assert entrypoint.wait_for_migrations(timeout=5) == 0


def test_wait_for_migrations_gives_up_with_a_reason_when_the_database_never_answers():
    env = {**os.environ, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    out = subprocess.run([sys.executable, "-m", "controlplane.entrypoint", "wait-for-migrations", "1"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "gave up waiting for migrations after 1s: database not reachable" in out.stderr


def test_the_gateway_role_starts_the_gateway_process_with_its_options():
    out = subprocess.run([sys.executable, "-m", "controlplane.entrypoint", "gateway", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--snapshot" in out.stdout and "--port" in out.stdout


def test_a_worker_takes_every_queue_unless_told_which_and_an_unknown_queue_stops_it():
    everything = entrypoint.worker_argv({})
    assert everything[everything.index("--queues") + 1].split(",") == [
        "default", "reconcile", "telemetry", "autoscale", "whatif"]  # the what-if lab's replays have their own
    only = entrypoint.worker_argv({"WORKER_QUEUES": "whatif", "CELERY_QUEUE_PREFIX": "p-"})
    assert only[only.index("--queues") + 1] == "p-whatif"
    with pytest.raises(SystemExit, match=r"unknown queue.*whatiff"):
        entrypoint.worker_argv({"WORKER_QUEUES": "default,whatiff"})
