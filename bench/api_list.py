"""Benchmark: latency and SQL queries of a 100-item page of /api/v1/services/.

Creates 10,000 services (one engine pool each) across 50 tenants in a throw-away test database
(`bench_<name>` next to DATABASE_URL's database), then requests list pages through the full Django
stack (bearer-token auth, scoping, pagination, serialization) as a staff user and as a tenant
member, and prints p50/p95 latency and queries per request.

    DEBUG=1 FIELD_ENCRYPTION_KEY=... DATABASE_URL=postgres://... .venv/bin/python bench/api_list.py
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from apps.catalog.models import Model, Runtime  # noqa: E402
from apps.clusters.models import Cluster  # noqa: E402
from apps.serving.models import InferenceService, Pool  # noqa: E402
from apps.tenancy.models import ApiToken, Membership, Tenant  # noqa: E402

TENANTS = 50
SERVICES = 10_000
PAGE = 100
ROUNDS = 60


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
    runtime = Runtime.objects.create(name="vllm", engine="vllm", image="vllm/vllm-openai", tag="v0.33.0")
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"tenant-{i:02d}", name=f"Tenant {i}", gpu_quota=10_000) for i in range(TENANTS)]
    )
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


def measure(token: str, pages: int) -> tuple[list[float], list[int], list[float]]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.get(f"/api/v1/services/?page_size={PAGE}")  # warm-up
    latencies, queries, sql_ms = [], [], []
    for _ in range(ROUNDS):
        page = random.randint(1, pages)
        with CaptureQueriesContext(connection) as ctx:
            start = time.perf_counter()
            response = client.get(f"/api/v1/services/?page_size={PAGE}&page={page}")
            latencies.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200 and len(response.json()["results"]) == PAGE, response.status_code
        queries.append(len(ctx.captured_queries))
        sql_ms.append(sum(float(q["time"]) for q in ctx.captured_queries) * 1000)
    return latencies, queries, sql_ms


def report(label: str, latencies: list[float], queries: list[int], sql_ms: list[float]) -> None:
    cuts = statistics.quantiles(latencies, n=100)
    print(
        f"{label:<14} p50 {cuts[49]:6.1f} ms  p95 {cuts[94]:6.1f} ms  queries/request {max(queries)}  "
        f"SQL p50 {statistics.median(sql_ms):5.1f} ms"
    )


def main() -> None:
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    # Its own database name, so a concurrent pytest run (test_<name>) is not clobbered.
    connection.settings_dict["TEST"]["NAME"] = f"bench_{old_name}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        started = time.perf_counter()
        staff_token, member_token = populate()
        with connection.cursor() as cursor:
            # What autovacuum does soon after a bulk load; without statistics the planner sorts.
            cursor.execute("ANALYZE")
        print(
            f"Created {SERVICES} services across {TENANTS} tenants in {time.perf_counter() - started:.1f} s; "
            f"{ROUNDS} requests of a {PAGE}-item page each."
        )
        report("staff", *measure(staff_token, SERVICES // PAGE))
        report("tenant member", *measure(member_token, SERVICES // TENANTS // PAGE))
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
