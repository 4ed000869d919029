"""The Job controller: a Job's pods run to completion and the Job reports Complete, or Failed once more
pods failed than `backoffLimit` allows."""

from __future__ import annotations

from kubernetes import client

from tests.polling import wait_for


def job(name: str, command: list[str] | None = None, backoff_limit: int = 6, completions: int = 1,
        restart_policy: str = "Never") -> dict:
    container = {"name": "task", "image": "registry.example.com/tool:1.0"}
    if command:
        container["command"] = command
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": backoff_limit, "completions": completions,
                 "template": {"spec": {"restartPolicy": restart_policy, "containers": [container]}}},
    }


def conditions(batch: client.BatchV1Api, name: str) -> dict[str, str]:
    status = batch.read_namespaced_job_status(name, "default").status
    return {c.type: c.reason for c in status.conditions or []}


def test_a_job_of_an_image_kubesim_does_not_simulate_completes(make_cluster):
    cluster = make_cluster()
    batch = client.BatchV1Api(cluster.api_client)
    batch.create_namespaced_job("default", job("migrate", completions=2))
    done = wait_for(lambda: conditions(batch, "migrate").get("Complete"), timeout=30, message="job complete")
    assert done == "CompletionsReached"
    status = batch.read_namespaced_job_status("migrate", "default").status
    assert status.succeeded == 2 and not status.active and not status.failed
    assert status.completion_time is not None
    pods = cluster.core.list_namespaced_pod("default", label_selector="batch.kubernetes.io/job-name=migrate").items
    assert sorted(p.status.phase for p in pods) == ["Succeeded", "Succeeded"]
    assert all(p.metadata.owner_references[0].kind == "Job" for p in pods)
    assert all(p.status.container_statuses[0].restart_count == 0 for p in pods)
    table = cluster.kubectl("get", "job", "migrate").stdout.split()
    assert table[:6] == ["NAME", "STATUS", "COMPLETIONS", "AGE", "migrate", "Complete"] and table[6] == "2/2"


def test_a_job_whose_pods_keep_failing_stops_at_the_backoff_limit(make_cluster):
    cluster = make_cluster()
    batch = client.BatchV1Api(cluster.api_client)
    batch.create_namespaced_job("default", job("broken", ["sh", "-c", "echo no database; exit 3"], backoff_limit=1))
    failed = wait_for(lambda: conditions(batch, "broken").get("Failed"), timeout=30, message="job failed")
    assert failed == "BackoffLimitExceeded"
    status = batch.read_namespaced_job_status("broken", "default").status
    assert status.failed == 2 and not status.succeeded  # backoffLimit 1: the second failure ends it
    assert "Complete" not in conditions(batch, "broken")
