"""The migration that turned each tenant's GPU quota into its queue: the same bound after as before, for services
of any GPU type on any cluster, and the platform's classes seeded."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("tenancy", "0002_token_expiry_required")]


@pytest.mark.django_db(transaction=True)
def test_a_tenants_gpu_quota_becomes_its_queue_with_the_same_bound():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    old.get_model("tenancy", "Tenant").objects.create(slug="acme", name="Acme", gpu_quota=12)
    old.get_model("tenancy", "Tenant").objects.create(slug="idle", name="Idle", gpu_quota=0)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    from apps.serving.quota import queue_for
    from apps.tenancy.models import PriorityClass, Tenant

    acme = Tenant.objects.get(slug="acme")
    queue = queue_for(acme.pk, cluster_id=None)
    assert (queue.nominal, queue.borrowing_limit, queue.lending_limit) == ({"*": 12}, {"*": 0}, {"*": 0})
    # Every GPU type counts against the one entry, and nothing is borrowed: 12 GPUs in all, as before.
    assert {queue.bucket(t) for t in ("l4-24gb", "h100-sxm-80gb")} == {"*"}
    assert (queue.ceiling("*"), queue.total_ceiling()) == (12, 12)
    assert queue_for(Tenant.objects.get(slug="idle").pk, cluster_id=None).total_ceiling() == 0
    assert set(PriorityClass.objects.values_list("name", "value")) >= {
        ("production", 1000), ("standard", 100), ("best-effort", 0), ("batch", -10)}
