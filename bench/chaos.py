"""Chaos campaign: services under kubesim faults survive a worker killed with -9 mid-pass, a broker restart and
a PostgreSQL restart; at the end every service converges, every change is applied, and nothing loops.

    python bench/chaos.py [--services 20] [--workers 2] [--budget 900] [--resync 10]

Everything it disturbs is its own, started here and stopped at the end: an embedded PostgreSQL in a
temporary directory (never the machine's shared server), a redis-server on a free port (never the shared
broker), kubesim with 10% API errors, 10% conflicts and 5% of watches dropped, and Celery
workers. The script plays beat too (a resync every RESYNC_TICK_SECONDS, skipped while the broker is down).

Phases: create the services and wait until Ready; change half of them and kill a worker with -9 while it
holds a reconcile claim; change and scale services while the broker is down, then restart it; stop
PostgreSQL (writes are refused meanwhile and made again once it is back), restart it; wait for convergence;
watch a quiet window of three resyncs (`--resync` seconds apart). Prints the counts; exits 1 when anything
failed to converge, was lost or kept being re-applied."""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.chaos_processes import (  # noqa: E402 (the repository root is on the path from here)
    RESYNC_TICK,
    Beat,
    Postgres,
    Redis,
    set_faults,
    start_kubesim,
    start_worker,
    wait,
)
from enginevocab.vllm import TAG as VLLM_TAG  # noqa: E402

FAULTS = {"error_rate": 0.1, "error_codes": [500, 503, 429], "conflict_rate": 0.1, "watch_drop_rate": 0.05}
LOCK_NAMESPACE = 0x5EC0  # workers.reconcile's claim


def seed(n: int, kubesim_url: str):
    from django.contrib.auth import get_user_model

    from apps.catalog.models import Model, Runtime
    from apps.clusters.models import Cluster
    from apps.core.choices import AuditVia
    from apps.serving.actions import save_service
    from apps.serving.models import InferenceService
    from apps.serving.rendering.spec import PoolSpec
    from apps.tenancy.models import Tenant
    from apps.tenancy.queues import set_gpu_quota

    staff = get_user_model().objects.create_user("chaos", is_staff=True, is_superuser=True)
    tenant = set_gpu_quota(Tenant.objects.create(slug="chaos", name="Chaos"), 10_000).tenant
    cluster = Cluster.objects.create(name="sim", api_url=kubesim_url, insecure_simulator=True, open_to_all_tenants=True)
    model = Model.objects.create(name="llama-3-1-8b", source_uri="hf://meta-llama/Llama-3.1-8B-Instruct",
                                 parameters_billions=8.03, layers=32, hidden_size=4096, attention_heads=32,
                                 kv_heads=8, head_dim=128, max_context=131072)
    # A mirror path kubesim runs as a plain container: the campaign measures the control plane, not engines.
    runtime = Runtime(name="vllm", engine="vllm", image="mirror.local/vllm/vllm-openai", tag=VLLM_TAG,
                      supported_modes=["standard"])
    runtime.full_clean()
    runtime.save()
    pool = PoolSpec(role="engine", replicas=1, min_replicas=1, max_replicas=3, gpus_per_replica=1)
    for i in range(n):
        service = InferenceService(tenant=tenant, name=f"svc-{i:02d}", cluster=cluster, model=model, runtime=runtime,
                                   engine_settings={"max_model_len": 8192})
        save_service(service, pools=[pool], adapters=[], actor=staff, via=AuditVia.API)
    return staff


class Changes:
    """Every change accepted by the database, to check at the end that the cluster has the last of each."""

    def __init__(self, staff):
        self.staff = staff
        self.made = 0
        self.refused = 0
        self.max_model_len: dict[str, int] = {}
        self.replicas: dict[str, int] = {}

    def spec(self, name: str, max_model_len: int) -> None:
        from apps.serving.actions import save_service
        from apps.serving.models import InferenceService
        from apps.serving.rendering.spec import PoolSpec

        service = InferenceService.objects.get(name=name)
        service.engine_settings = {**service.engine_settings, "max_model_len": max_model_len}
        pools = [PoolSpec(role=p.role, replicas=p.replicas, min_replicas=p.min_replicas, max_replicas=p.max_replicas,
                          gpus_per_replica=p.gpus_per_replica, gpu_type=p.gpu_type) for p in service.pools.all()]
        save_service(service, pools=pools, adapters=list(service.adapters.all()), actor=self.staff, via="api")
        self.max_model_len[name] = max_model_len
        self.made += 1

    def scale(self, name: str, replicas: int) -> None:
        from apps.serving.actions import scale_pool
        from apps.serving.models import InferenceService

        scale_pool(InferenceService.objects.get(name=name), role="engine", replicas=replicas, actor=self.staff,
                   via="api")
        self.replicas[name] = replicas
        self.made += 1


def claim_held() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objsubid = 2 "
                       "AND granted", [LOCK_NAMESPACE])
        return cursor.fetchone() is not None


def converged(apps_api, n: int, changes: Changes) -> dict | None:
    """Counts when every service is Ready at its generation with exactly one Deployment per pool showing
    the last change; None otherwise."""
    from django.db.models import F

    from apps.serving.choices import Phase
    from apps.serving.models import InferenceService

    services = list(InferenceService.objects.prefetch_related("pools"))
    if len(services) != n or any(s.phase != Phase.READY or s.observed_generation != s.generation for s in services):
        return None
    behind = InferenceService.objects.exclude(observed_generation=F("generation")).count()
    found = deployments(apps_api)
    per_pool: dict[tuple[str, str], list] = {}
    for d in found:
        labels = d.metadata.labels or {}
        per_pool.setdefault((labels.get("controlplane.io/service-uid"), labels.get("app.kubernetes.io/component")),
                            []).append(d)
    applied = 0
    for s in services:
        mine = per_pool.get((str(s.uid), "engine"), [])
        if len(mine) != 1:
            return None
        args = mine[0].spec.template.spec.containers[0].args or []
        want_len = changes.max_model_len.get(s.name, 8192)
        want_replicas = changes.replicas.get(s.name, 1)
        flag = args.index("--max-model-len") if "--max-model-len" in args else -2
        if args[flag + 1:flag + 2] != [str(want_len)] or mine[0].spec.replicas != want_replicas:
            return None
        applied += (s.name in changes.max_model_len) + (s.name in changes.replicas)
    return {"services": len(services), "behind": behind, "deployments": len(found),
            "pools": len(per_pool), "changes_applied": applied}


def reconcile_writes() -> int:
    from django.db.models import Sum

    from apps.serving.models import ReconcileRun

    return ReconcileRun.objects.aggregate(w=Sum("applied") + Sum("pruned"))["w"] or 0


def deployments(apps_api, attempts: int = 9) -> list:
    """The campaign's Deployments, retried on transient errors as the product's calls are (workers.kube): the
    measurement must not fail on the faults it measures, which kubesim injects into the bench's requests too."""
    from workers.kubeerrors import TransientClusterError, classify

    for attempt in range(attempts):  # more patient than a pass's three: nothing retries this read after it
        try:
            return apps_api.list_namespaced_deployment("tenant-chaos").items
        except Exception as exc:
            if attempt == attempts - 1 or not isinstance(classify(exc), TransientClusterError):
                raise
            time.sleep(0.1 * 2 ** min(attempt, 4))
    return []


class Campaign:
    """What the phases share: the private servers, the processes to stop, the cluster client and the clock."""

    def __init__(self, args):
        self.args = args
        self.base = Path(tempfile.mkdtemp(prefix="chaos-"))
        self.pg, self.redis = Postgres(self.base), Redis(self.base)
        self.beat = Beat()
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self.started = time.monotonic()
        self.names = [f"svc-{i:02d}" for i in range(args.services)]

    def start(self) -> None:
        """PostgreSQL, the broker, kubesim with its faults, Django, the workers and the beat."""
        database_url = self.pg.start()
        self.redis.start()
        kubesim, self.kubesim_url = start_kubesim(
            self.base, f"h100-sxm-80gb:{max(2, (self.args.services * 3 + 7) // 8)}x8")
        self.procs.append(kubesim)
        self.env = {
            "DATABASE_URL": database_url, "CELERY_BROKER_URL": self.redis.url, "CELERY_QUEUE_PREFIX": "chaos-",
            "FIELD_ENCRYPTION_KEY": __import__("cryptography.fernet").fernet.Fernet.generate_key().decode(),
            "SECRET_KEY": secrets.token_urlsafe(32), "DEBUG": "false", "IMAGE_REGISTRIES": "mirror.local/vllm",
            "RESYNC_TICK_SECONDS": str(RESYNC_TICK), "RECONCILE_RESYNC_SECONDS": str(self.args.resync),
            "RECONCILE_QUEUED_EXPIRY_SECONDS": "15", "RECONCILE_PASS_DEADLINE_SECONDS": "20",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        }
        os.environ.update(self.env)
        import django
        from django.core.management import call_command

        django.setup()
        for noisy in ("celery", "kombu", "apps.serving.dispatch"):  # the broker outage is expected here
            logging.getLogger(noisy).setLevel(logging.CRITICAL)
        call_command("migrate", verbosity=0)
        from kubernetes import client as k8s

        cfg = k8s.Configuration()
        cfg.host = self.kubesim_url
        self.apps_api = k8s.AppsV1Api(k8s.ApiClient(cfg))
        set_faults(self.kubesim_url, FAULTS)
        self.workers = [start_worker(self.base, self.env, i) for i in range(self.args.workers)]
        self.procs.extend(self.workers)
        self.beat.start()
        self.changes = Changes(seed(self.args.services, self.kubesim_url))

    def settle(self, what: str) -> dict:
        from django.db import close_old_connections

        def check():
            close_old_connections()
            return converged(self.apps_api, self.args.services, self.changes)
        return wait(check, self.args.budget - (time.monotonic() - self.started), what, interval=1.0)

    def kill_a_worker_mid_pass(self) -> None:
        """A worker killed with -9 while it holds a reconcile claim."""
        for i, name in enumerate(self.names[::2]):
            self.changes.spec(name, 4096 + 256 * i)
        wait(claim_held, 60, "a reconcile in flight", interval=0.02)
        victim = self.workers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        self.workers[0] = start_worker(self.base, self.env, self.args.workers)
        self.procs.append(self.workers[0])
        print(f"phase 2: worker pid {victim.pid} killed with -9 mid-pass; {len(self.names[::2])} changes pending",
              flush=True)

    def broker_outage(self) -> None:
        """The broker down: changes and scale calls are accepted by the database, their messages are lost."""
        changes = self.changes
        outage_changes = changes.made
        self.redis.stop()
        slowest = 0.0
        for i, name in enumerate(self.names[1::2]):
            for change in (lambda: changes.scale(name, 2), lambda: changes.spec(name, 6144 + 128 * i)):  # noqa: B023
                began = time.monotonic()
                change()
                slowest = max(slowest, time.monotonic() - began)
        time.sleep(3)
        self.redis.start()
        print(f"phase 3: broker restarted; {changes.made - outage_changes} changes made while it was down "
              f"(slowest write {slowest:.1f}s)", flush=True)

    def database_outage(self) -> None:
        """PostgreSQL down: writes are refused (and made again once it is back)."""
        from django.db import connection

        self.pg.stop()
        refused = []
        for name in self.names[:3]:
            try:
                self.changes.scale(name, 3)
            except Exception:
                self.changes.refused += 1
                refused.append(name)
                connection.close()
        time.sleep(3)
        self.pg.restart()
        connection.close()
        for name in refused:
            self.changes.scale(name, 3)
        print(f"phase 4: PostgreSQL restarted; {self.changes.refused} writes refused while down, made again after",
              flush=True)

    def quiet_window(self) -> dict:
        """What moved during three resync intervals of a converged fleet: it should write nothing."""
        from django.db import close_old_connections

        from apps.autoscaling.models import ScalingDecision

        def generations() -> int:
            return sum(d.metadata.generation for d in deployments(self.apps_api))

        decisions_before = ScalingDecision.objects.count()
        writes_before = reconcile_writes()
        generations_before = generations()
        time.sleep(3 * self.args.resync)
        close_old_connections()
        return {"writes": reconcile_writes() - writes_before,
                "decisions": ScalingDecision.objects.count() - decisions_before,
                "generations": generations() - generations_before}

    def report(self, counts: dict, quiet: dict, converged_at: float) -> int:
        """Print the campaign's counts; 0 when everything converged, was applied and nothing moved after."""
        from apps.autoscaling.models import ScalingDecision
        from apps.serving.models import ReconcileRun

        changes = self.changes
        expected = len(changes.max_model_len) + len(changes.replicas)
        print("\nchaos campaign")
        print(f"  services                      {counts['services']}")
        print(f"  converged (Ready, up to date) {counts['services'] - counts['behind']}/{counts['services']}")
        print(f"  engine pools / Deployments    {counts['pools']} / {counts['deployments']} "
              f"(exactly one per pool: {counts['pools'] == counts['deployments'] == counts['services']})")
        print(f"  changes accepted              {changes.made} (refused while the database was down: "
              f"{changes.refused}, made again after)")
        print(f"  last changes on the cluster   {counts['changes_applied']}/{expected} (the last spec change and "
              "scale of every service touched)")
        print(f"  reconcile runs recorded       {ReconcileRun.objects.count()}")
        print(f"  resyncs sent                  {self.beat.sent}")
        print(f"  writes in the quiet window    {quiet['writes']} (Deployment generations moved: "
              f"{quiet['generations']})")
        print(f"  scaling decisions             {ScalingDecision.objects.count()} in all, {quiet['decisions']} in "
              "the quiet window (the campaign's services scale by hand)")
        print(f"  converged after               {converged_at:.0f}s")
        ok = (counts["behind"] == 0 and counts["pools"] == counts["deployments"] == counts["services"]
              and counts["changes_applied"] == expected > 0 and not any(quiet.values()))
        print(f"  result                        {'OK' if ok else 'FAILED'}")
        return 0 if ok else 1

    def stop(self) -> None:
        """Stop everything started here; keep the logs and data only when asked or after a failure."""
        self.beat.stopped.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.redis.stop()
        try:
            from django.db import connections

            connections.close_all()
            self.pg.stop()
        except Exception:
            pass
        if not self.args.keep:
            shutil.rmtree(self.base, ignore_errors=True)


def run(args) -> int:
    campaign = Campaign(args)
    try:
        campaign.start()
        campaign.settle("the first convergence")
        print(f"phase 1: {args.services} services Ready under faults after "
              f"{time.monotonic() - campaign.started:.0f}s", flush=True)
        campaign.kill_a_worker_mid_pass()
        campaign.broker_outage()
        campaign.database_outage()
        counts = campaign.settle("convergence after the outages")
        converged_at = time.monotonic() - campaign.started
        return campaign.report(counts, campaign.quiet_window(), converged_at)
    except TimeoutError as exc:
        print(f"chaos campaign FAILED: {exc}; logs in {campaign.base}")
        args.keep = True
        return 1
    finally:
        campaign.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget", type=float, default=900, help="seconds before the campaign gives up")
    parser.add_argument("--resync", type=int, default=10, help="seconds between resyncs of a service (the quiet "
                        "window is three of them)")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data directory")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
