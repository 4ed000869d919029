"""kubesim's Kueue against a real `python -m kubesim serve` process, through the official client and kubectl:
borrowing idle quota, reclaiming it by preemption, priority within a queue, groups admitted whole or not at all,
and a cluster started without Kueue. Expected figures are worked from the quotas, not read from the code."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from kubernetes import client

from capacity.kueue import Queue
from kubesim.cluster.kueue import policy_queue
from tests.kubesim.cluster_support import deployment, pod_manifest
from tests.polling import wait_for
from tests.ports import free_port

GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
L4 = "l4-24gb"  # the flavor is named by the GPU key, so sentences say "L4"
L4_NODES = {"nvidia.com/gpu.product": "NVIDIA-L4"}
QUEUE, CLASS = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"
GATED = "SchedulingGated"


class Kube:
    """A kubesim process and the clients that talk to it."""

    def __init__(self, url: str):
        cfg = client.Configuration()
        cfg.host = url
        self.url, self.api = url, client.ApiClient(cfg)
        self.core, self.apps, self.custom = (client.CoreV1Api(self.api), client.AppsV1Api(self.api),
                                             client.CustomObjectsApi(self.api))

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(["kubectl", "--server", self.url, *args], input=stdin, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0 or not check, proc.stderr
        return proc.stdout if check else proc.stderr

    def create(self, plural: str, body: dict, namespace: str | None = None) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        if namespace:
            return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
        return self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)

    def workloads(self, namespace: str) -> list[dict]:
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]

    def cluster_queue(self, name: str) -> dict:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)

    def pods(self, namespace: str) -> list:
        return self.core.list_namespaced_pod(namespace).items

    def tenant(self, name: str, nominal: int, cohort: str | None = None, **preemption) -> None:
        """A namespace, its LocalQueue `q` and a ClusterQueue of the same name with `nominal` L4s."""
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        spec = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": L4, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": nominal}]}]}],
            "preemption": preemption}
        if cohort:
            spec["cohort"] = cohort
        self.create("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})
        self.create("localqueues", {"kind": "LocalQueue", "metadata": {"name": "q"}, "spec": {"clusterQueue": name}},
                    name)


@pytest.fixture
def kube():
    """`python -m kubesim serve` with four 4-GPU L4 nodes, Kueue on (the default), one flavor and two classes."""
    with serving() as k:
        k.create("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": L4},
                                     "spec": {"nodeLabels": L4_NODES}})
        for name, value in (("production", 1000), ("best-effort", 0)):
            k.create("workloadpriorityclasses", {"kind": "WorkloadPriorityClass", "metadata": {"name": name},
                                                 "value": value})
        yield k


@contextlib.contextmanager
def serving(*flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start",
                             "--nodes", "l4-24gb:4x4", "--seed", "3", "--no-dcgm-exporter", *flags],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line = proc.stdout.readline()
        assert "listening" in line, line
        k = Kube(f"http://127.0.0.1:{port}")
        wait_for(lambda: k.core.list_node().items, message="nodes registered")
        yield k
        k.api.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def queued(name: str, replicas: int, klass: str, gpus: int = 1) -> dict:
    body = deployment(name, replicas, gpus=gpus)
    # On the Deployment only: Kueue's webhook copies them to its pod template.
    body["metadata"]["labels"] = {**body["metadata"]["labels"], QUEUE: "q", CLASS: klass}
    return body


def condition(wl: dict, kind: str) -> dict:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def admitted(workloads: list[dict]) -> list[dict]:
    return [w for w in workloads if condition(w, "Admitted").get("status") == "True"]


def usage(k: Kube, cq: str) -> dict:
    """{"total": ..., "borrowed": ...} of the L4s a ClusterQueue's status reports."""
    flavors = (k.cluster_queue(cq).get("status") or {}).get("flavorsReservation") or []
    return next(({"total": r["total"], "borrowed": r["borrowed"]} for f in flavors if f["name"] == L4
                 for r in f["resources"]), {})


def status_of(pod) -> str:
    if pod.spec.node_name:
        return "Bound"
    return GATED if pod.spec.scheduling_gates else "Pending"


def test_idle_quota_is_borrowed_and_the_lender_reclaims_it_by_preempting_the_borrower(kube):
    kube.tenant("acme", 4, cohort="shared", reclaimWithinCohort="Any", withinClusterQueue="LowerPriority")
    kube.tenant("globex", 4, cohort="shared", reclaimWithinCohort="Any", withinClusterQueue="LowerPriority")
    kube.apps.create_namespaced_deployment("acme", queued("batch", 6, "best-effort"))
    # acme's 4 and 2 of idle globex's 4: all 6 replicas run, 2 on borrowed quota.
    wait_for(lambda: len(admitted(kube.workloads("acme"))) == 6, message="6 acme workloads admitted")
    wait_for(lambda: usage(kube, "acme") == {"total": "6", "borrowed": "2"}, message="acme's usage")
    messages = [condition(w, "QuotaReserved")["message"] for w in kube.workloads("acme")]
    assert sorted(messages) == ["Quota reserved in ClusterQueue acme"] * 4 + [
        "Quota reserved in ClusterQueue acme, borrowing 1 L4 from globex"] * 2
    pods = wait_for(lambda: (p := kube.pods("acme")) and all(x.spec.node_name for x in p) and p, message="bound")
    assert all(p.spec.node_selector == L4_NODES and not p.spec.scheduling_gates for p in pods)

    # globex needs 3 of its own 4: 2 are free in the cohort, the third is reclaimed from acme's borrowers.
    kube.apps.create_namespaced_deployment("globex", queued("chat", 3, "production"))
    wait_for(lambda: len(admitted(kube.workloads("globex"))) == 3, message="3 globex workloads admitted")
    preempted = wait_for(lambda: [w for w in kube.workloads("acme") if condition(w, "Preempted").get("status")
                                  == "True"], message="an acme workload preempted")
    assert len(preempted) == 1
    by = condition(preempted[0], "Preempted")
    assert by["reason"] == "InCohortReclamation"
    globex_keys = {f"globex/{w['metadata']['name']}" for w in kube.workloads("globex")}
    assert by["message"] in {f"preempted by {key} (production 1000 > best-effort 0) to reclaim globex's nominal quota"
                             for key in globex_keys}
    wait_for(lambda: usage(kube, "acme") == {"total": "5", "borrowed": "1"}, message="acme back to 5")
    # The preempted pod is gone; its replacement waits at its scheduling gate, first in acme's queue.
    pods = wait_for(lambda: (p := kube.pods("acme")) and len(p) == 6 and p, message="replacement created")
    assert sorted(status_of(p) for p in pods) == ["Bound"] * 5 + [GATED]
    waiting = wait_for(lambda: [w for w in kube.workloads("acme") if condition(w, "QuotaReserved").get("reason")
                                == "Pending"], message="replacement's workload pending")
    assert condition(waiting[0], "QuotaReserved")["message"] == "1st in acme's queue; the cohort has no free L4"

    # kubectl shows it as on a real cluster: the columns, the pending count, the conditions and the events.
    table = kube.kubectl("get", "workloads,clusterqueues", "-n", "acme")
    assert "RESERVED IN" in table and "ADMITTED" in table and "COHORT" in table
    row = next(line.split() for line in table.splitlines() if line.startswith("clusterqueue.kueue.x-k8s.io/acme "))
    assert row[1:3] == ["shared", "1"]  # COHORT, PENDING WORKLOADS
    wide = kube.kubectl("get", "clusterqueue", "acme", "-o", "wide").splitlines()[1].split()
    assert wide[:5] == ["acme", "shared", "BestEffortFIFO", "1", "5"]  # STRATEGY by default; ADMITTED WORKLOADS
    holder = admitted(kube.workloads("acme"))[0]["metadata"]["name"]
    row = next(line.split() for line in table.splitlines() if line.startswith(f"workload.kueue.x-k8s.io/{holder} "))
    assert row[1:4] == ["q", "acme", "True"]  # QUEUE, RESERVED IN, ADMITTED
    described = kube.kubectl("describe", "workload", "-n", "acme", preempted[0]["metadata"]["name"])
    assert "InCohortReclamation" in described
    assert any(line.split()[:2] == ["Normal", "Preempted"] and by["message"] in line for line in described.splitlines())
    pod_row = next(line.split() for line in kube.kubectl("get", "pods", "-n", "acme").splitlines()
                   if line.startswith(waiting[0]["metadata"]["name"].removeprefix("pod-")))
    assert pod_row[1:3] == ["0/1", GATED]


def test_a_higher_priority_replica_preempts_a_lower_one_of_its_own_queue(kube):
    kube.tenant("solo", 2, withinClusterQueue="LowerPriority")
    kube.apps.create_namespaced_deployment("solo", queued("batch", 2, "best-effort"))
    wait_for(lambda: len(admitted(kube.workloads("solo"))) == 2, message="2 best-effort admitted")
    kube.apps.create_namespaced_deployment("solo", queued("chat", 1, "production"))
    chat = wait_for(lambda: [w for w in admitted(kube.workloads("solo")) if w["spec"]["priority"] == 1000],
                    message="production admitted")
    preempted = wait_for(lambda: [w for w in kube.workloads("solo") if condition(w, "Preempted").get("status")
                                  == "True"], message="a best-effort workload preempted")
    assert len(preempted) == 1
    assert condition(preempted[0], "Preempted")["reason"] == "InClusterQueue"
    assert condition(preempted[0], "Preempted")["message"] == (
        f"preempted by solo/{chat[0]['metadata']['name']} (production 1000 > best-effort 0) within solo's queue")
    waiting = wait_for(lambda: [w for w in kube.workloads("solo") if condition(w, "QuotaReserved").get("reason")
                                == "Pending"], message="best-effort replacement pending")
    assert condition(waiting[0], "QuotaReserved")["message"] == "1st in solo's queue; solo's queue has no free L4"


def leader_worker_set(name: str, size: int) -> dict:
    template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
        {"name": "engine", "image": "nginx:1.27", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": {QUEUE: "q", CLASS: "production"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}}}


def test_a_leaderworkerset_group_is_admitted_whole_or_not_at_all(kube):
    kube.tenant("gang", 4)
    lws = ("leaderworkerset.x-k8s.io", "v1", "gang", "leaderworkersets")
    kube.custom.create_namespaced_custom_object(*lws, leader_worker_set("small", 2))
    wait_for(lambda: len(admitted(kube.workloads("gang"))) == 1, message="the 2-GPU group admitted")
    # 3 more GPUs for a group of 3 while 2 of the queue's 4 are free: none of its pods may start.
    kube.custom.create_namespaced_custom_object(*lws, leader_worker_set("big", 3))
    big = wait_for(lambda: [w for w in kube.workloads("gang") if w["metadata"]["name"] == "leaderworkerset-big-0"
                            and condition(w, "QuotaReserved").get("reason") == "Pending"], message="big pending")[0]
    assert condition(big, "QuotaReserved")["message"] == "1st in gang's queue; gang's queue has 2 free L4, it needs 3"
    assert [(s["name"], s["count"]) for s in big["spec"]["podSets"]] == [("leader", 1), ("workers", 2)]
    members = wait_for(lambda: (p := [x for x in kube.pods("gang") if x.metadata.name.startswith("big-")])
                       and len(p) == 3 and p, message="big's 3 pods")
    assert [status_of(p) for p in members] == [GATED] * 3
    # The small set scales to no group: the big one is admitted, and all three of its pods are bound together.
    kube.custom.patch_namespaced_custom_object(*lws, "small", {"spec": {"replicas": 0}})
    wait_for(lambda: [status_of(p) for p in kube.pods("gang") if p.metadata.name.startswith("big-")] == ["Bound"] * 3,
             message="big's pods bound")
    big = next(w for w in kube.workloads("gang") if w["metadata"]["name"] == "leaderworkerset-big-0")
    assert [(a["name"], a["count"], a["resourceUsage"]["nvidia.com/gpu"]) for a in
            big["status"]["admission"]["podSetAssignments"]] == [("leader", 1, "1"), ("workers", 2, "2")]


def test_a_pod_group_waits_whole_until_its_queue_holds_all_of_it(kube):
    kube.tenant("pg", 1)
    for i in range(2):
        body = pod_manifest(f"member-{i}", gpus=1, labels={QUEUE: "q", "kueue.x-k8s.io/pod-group-name": "pair"})
        body["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
        kube.core.create_namespaced_pod("pg", body)
    pair = wait_for(lambda: [w for w in kube.workloads("pg") if condition(w, "QuotaReserved").get("reason")
                             == "Pending"], message="the pair pending")[0]
    assert pair["metadata"]["name"] == "pair" and pair["spec"]["podSets"][0]["count"] == 2
    assert condition(pair, "QuotaReserved")["message"] == "1st in pg's queue; pg's queue has 1 free L4, it needs 2"
    assert [status_of(p) for p in kube.pods("pg")] == [GATED] * 2
    kube.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", "pg", {"spec": {"resourceGroups": [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": L4, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}})
    wait_for(lambda: [status_of(p) for p in kube.pods("pg")] == ["Bound"] * 2, message="both members bound")


def test_kueue_objects_are_checked_against_their_schemas(kube):
    misspelt = json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": "x"},
                           "spec": {"cohrt": "shared", "resourceGroups": []}})
    refused = kube.kubectl("apply", "-f", "-", stdin=misspelt, check=False)
    assert 'strict decoding error: unknown field "spec.cohrt"' in refused
    explained = kube.kubectl("explain", "clusterqueue.spec.resourceGroups.flavors.resources")
    assert "nominalQuota" in explained and "borrowingLimit" in explained and "lendingLimit" in explained


def test_without_kueue_its_api_is_not_served_and_queued_pods_are_not_held():
    with serving("--no-kueue") as k:
        groups = [g.name for g in client.ApisApi(k.api).get_api_versions().groups]
        assert "kueue.x-k8s.io" not in groups and "leaderworkerset.x-k8s.io" in groups
        k.core.create_namespaced_pod("default", pod_manifest("p", gpus=1, labels={QUEUE: "q"}))
        wait_for(lambda: k.core.read_namespaced_pod("p", "default").spec.node_name, message="pod bound")
        assert not k.core.read_namespaced_pod("p", "default").spec.scheduling_gates


def test_a_cluster_queue_reads_as_the_policy_queue_with_its_limits_weight_and_kueues_defaults():
    cq = {"metadata": {"name": "acme"}, "spec": {
        "cohort": "shared", "fairSharing": {"weight": "1500m"},
        "preemption": {"reclaimWithinCohort": "Any"},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "cpu"], "flavors": [
            {"name": L4, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "6", "borrowingLimit": 2,
                                        "lendingLimit": "4"}, {"name": "cpu", "nominalQuota": "96"}]},
            {"name": "h100-sxm-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}}
    assert policy_queue(cq) == Queue(
        "acme", "shared", nominal={L4: 6, "h100-sxm-80gb": 8}, borrowing_limit={L4: 2, "h100-sxm-80gb": None},
        lending_limit={L4: 4, "h100-sxm-80gb": None}, weight=1.5, reclaim_within_cohort="Any",
        borrow_within_cohort="Never")
