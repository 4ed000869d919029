"""Benchmark: latency and SQL queries of a 100-item page of /api/v1/services/.

Creates 10,000 services (one engine pool each) across 50 tenants in a throw-away test database
(`bench_<name>` next to DATABASE_URL's database), then requests list pages through the full Django
stack (bearer-token auth, scoping, pagination, serialization) as a staff user and as a tenant
member, and prints p50/p95 latency and queries per request.

Pages are requested at three depths (first, middle, last), by page number (`?page=`) and by keyset
cursor (`?cursor=`), interleaved; each line also shows the SQL time and the longest garbage-collector
pause inside one request. The process warms up as the WSGI entry point does (`controlplane.warmup`:
views imported, start-up objects frozen out of the collector's reach, young generations collected
after each response); `--no-warm-up` shows the figures without it.

Settings are a production web process's: DEBUG off (`controlplane.devenv` turns it on for local runs), a
throw-away SECRET_KEY, requests over HTTPS (as behind the TLS-terminating proxy). Besides wall-clock
latency, each line gives the CPU time this process spent per request (the DB server's is not in it), which
varies less than latency when other work shares the machine.

    .venv/bin/python -m controlplane.devenv test python bench/api_list.py [--no-warm-up]
"""

from __future__ import annotations

import argparse
import gc
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The options are read before Django is set up: `--help` needs no database.
_parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
_parser.add_argument("--no-warm-up", dest="warm", action="store_false",
                     help="measure without the WSGI entry point's warm-up (controlplane.warmup)")
WARM = _parser.parse_args().warm

from controlplane.devenv import fall_back_when_unconfigured  # noqa: E402

fall_back_when_unconfigured("bench/api_list.py")  # a fresh shell: the local database and keys of manage.py
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ["DEBUG"] = "false"
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.signals import request_finished  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from apps.catalog.models import Model, Runtime  # noqa: E402
from apps.clusters.models import Cluster  # noqa: E402
from apps.serving.models import InferenceService, Pool  # noqa: E402
from apps.tenancy.models import ApiToken, Membership, Tenant  # noqa: E402
from apps.tenancy.queues import set_gpu_quota  # noqa: E402
from bench.common import throwaway_database  # noqa: E402
from controlplane.warmup import collect_after_response, warm_up  # noqa: E402
from enginevocab.vllm import TAG as VLLM_TAG  # noqa: E402

TENANTS = 50
SERVICES = 10_000
PAGE = 100
ROUNDS = 40


def populate() -> tuple[str, str]:
    """Bulk-create the world; return bearer tokens for a staff user and a member of one tenant."""
    User = get_user_model()
    cluster = Cluster.objects.create(name="sim", api_url="http://127.0.0.1:6443", insecure_simulator=True,
                                     open_to_all_tenants=True)
    model = Model.objects.create(
        name="llama-3-1-8b",
        source_uri="hf://meta-llama/Llama-3.1-8B-Instruct",
        parameters_billions=8.03,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        max_context=131072,
    )
    runtime = Runtime.objects.create(name="vllm", engine="vllm", image="vllm/vllm-openai", tag=VLLM_TAG)
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"tenant-{i:02d}", name=f"Tenant {i}") for i in range(TENANTS)]
    )
    for tenant in tenants:
        set_gpu_quota(tenant, 10_000)
    services = InferenceService.objects.bulk_create(
        [
            InferenceService(
                tenant=tenants[i % TENANTS], name=f"svc-{i:05d}", cluster=cluster, model=model, runtime=runtime
            )
            for i in range(SERVICES)
        ],
        batch_size=2000,
    )
    Pool.objects.bulk_create(
        [Pool(service=s, role="engine", replicas=1, min_replicas=1, max_replicas=2) for s in services],
        batch_size=2000,
    )
    staff = User.objects.create(username="staff", is_staff=True)
    member = User.objects.create(username="member")
    Membership.objects.create(user=member, tenant=tenants[7], role="viewer")
    tokens = []
    for user in (staff, member):
        token, plaintext = ApiToken.generate(user=user)
        token.save()
        tokens.append(plaintext)
    return tokens[0], tokens[1]


class GcClock:
    """Time spent in the garbage collector, read per request (a likely source of a latency tail)."""

    def __init__(self):
        self.total = 0.0
        self._started = 0.0
        self.by_generation = [[0, 0.0], [0, 0.0], [0, 0.0]]  # collections and seconds per generation
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            spent = time.perf_counter() - self._started
            self.total += spent
            self.by_generation[info["generation"]][0] += 1
            self.by_generation[info["generation"]][1] += spent


GC = GcClock()
AFTER: list[float] = []  # ms of each after-response collection


def get(client: APIClient, url: str) -> tuple[dict, float, int, float, float, float]:
    """One request: its JSON, latency, query count, SQL time, GC time and CPU time (ms)."""
    gc_before = GC.total
    with CaptureQueriesContext(connection) as ctx:
        cpu = time.process_time()
        start = time.perf_counter()
        response = client.get(url, secure=True)
        latency = (time.perf_counter() - start) * 1000
        cpu = (time.process_time() - cpu) * 1000
    assert response.status_code == 200 and len(response.json()["results"]) == PAGE, response.status_code
    sql = sum(float(q["time"]) for q in ctx.captured_queries) * 1000
    gc_ms = (GC.total - gc_before) * 1000
    if WARM:
        # A WSGI server closes the response (request_finished) after the body is sent; the test client
        # closes it inside get(). So the after-response collection runs here, outside the timed window.
        started = time.perf_counter()
        collect_after_response()
        AFTER.append((time.perf_counter() - started) * 1000)
    return response.json(), latency, len(ctx.captured_queries), sql, gc_ms, cpu


def measure(token: str, pages: int, cursor: bool) -> dict[str, list[tuple[float, int, float, float, float]]]:
    """ROUNDS requests at each page depth (first, middle, last), by page number or by cursor."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    depths = {"first": 1, "middle": (pages + 1) // 2, "last": pages}
    urls = {}
    if cursor:
        # The cursor of each depth, found by walking the list once.
        url, page = f"/api/v1/services/?page_size={PAGE}&cursor=", 1
        while page <= pages:
            for label, depth in depths.items():
                if depth == page:
                    urls[label] = url
            body = get(client, url)[0]
            url, page = body["next"], page + 1
    else:
        urls = {label: f"/api/v1/services/?page_size={PAGE}&page={depth}" for label, depth in depths.items()}
    get(client, urls["first"])  # warm-up
    samples: dict[str, list] = {label: [] for label in depths}
    for _ in range(ROUNDS):
        for label in depths:  # interleaved, so load from elsewhere hits every depth alike
            samples[label].append(get(client, urls[label])[1:])
    return samples


def report(who: str, how: str, samples: dict[str, list[tuple[float, int, float, float, float]]]) -> None:
    for depth, rows in samples.items():
        latencies = [r[0] for r in rows]
        cuts = statistics.quantiles(latencies, n=100)
        print(
            f"{who:<7} {how:<6} {depth:<6}  p50 {cuts[49]:6.1f} ms  p95 {cuts[94]:6.1f} ms  "
            f"p95/p50 {cuts[94] / cuts[49]:4.2f}  queries/request {min(r[1] for r in rows)}-{max(r[1] for r in rows)}  "
            f"SQL p50 {statistics.median(r[2] for r in rows):5.1f} ms  GC max {max(r[3] for r in rows):5.1f} ms  "
            f"CPU p50 {statistics.median(r[4] for r in rows):5.1f} ms"
        )


def main() -> None:
    import logging

    logging.getLogger("controlplane.access").setLevel(logging.WARNING)  # a line per request buries the figures
    setup_test_environment()
    with throwaway_database():
        started = time.perf_counter()
        staff_token, member_token = populate()
        with connection.cursor() as cursor:
            # What autovacuum does soon after a bulk load (it vacuums insert-only tables too): statistics,
            # without which the planner sorts, and the visibility map, without which an index-only scan
            # still visits the table for every row.
            cursor.execute("VACUUM ANALYZE")
        if WARM:
            warm_up()  # what controlplane/wsgi.py does at start-up
            request_finished.disconnect(dispatch_uid="controlplane.warmup")  # see get()
        print(
            f"Created {SERVICES} services across {TENANTS} tenants in {time.perf_counter() - started:.1f} s; "
            f"{ROUNDS} requests of a {PAGE}-item page each; DEBUG {'on' if settings.DEBUG else 'off'}; "
            f"load average {os.getloadavg()[0]:.1f}."
        )
        tracked = len(gc.get_objects())
        for how in ("page", "cursor"):
            report("staff", how, measure(staff_token, SERVICES // PAGE, cursor=how == "cursor"))
            report("member", how, measure(member_token, SERVICES // TENANTS // PAGE, cursor=how == "cursor"))
        print(f"GC: {tracked} objects tracked at the start of the measurement; collections (count, total ms) "
              "by generation: " + ", ".join(f"gen{g} {n} / {t * 1000:.0f} ms"
                                             for g, (n, t) in enumerate(GC.by_generation)))
        if AFTER:
            print(f"after-response collections (outside the request): p50 {statistics.median(AFTER):.1f} ms, "
                  f"max {max(AFTER):.1f} ms")


if __name__ == "__main__":
    main()
