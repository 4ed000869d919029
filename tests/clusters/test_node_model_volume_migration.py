"""The migration that added the node model volume: clusters registered before it read no node copies ("none", the
safe default: no CSI node plugin ships), except the local simulators, which keep the CSI volume kubesim accepts."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("clusters", "0009_gpunode_agent_events")]


@pytest.mark.django_db(transaction=True)
def test_real_clusters_get_none_and_simulators_keep_csi():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("clusters", "Cluster")
    old.objects.create(name="east", api_url="https://k8s.example.internal:6443", bearer_token="t")
    old.objects.create(name="sim", api_url="http://127.0.0.1:6443", insecure_simulator=True)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    from apps.clusters.models import Cluster

    assert dict(Cluster.objects.values_list("name", "node_model_volume")) == {"east": "none", "sim": "csi"}
