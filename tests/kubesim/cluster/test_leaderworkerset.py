"""kubesim's LeaderWorkerSet controller seen through the official client: groups of a leader and workers with
their labels, environment and status, scaling through the scale subresource, a group recreated whole when one
member crashes, and a template change rolled out one group at a time."""

from tests.kubesim.cluster_support import is_ready
from tests.polling import wait_for

NS = "default"
LWS_GROUP = ("leaderworkerset.x-k8s.io", "v1")


def lws_body(name: str, replicas: int, size: int) -> dict:
    template = {"spec": {"containers": [{"name": "engine", "image": "nginx:1.27", "ports": [{"containerPort": 8000}]}]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}},
    }


def lws_pods(cluster, name: str) -> list:
    return cluster.core.list_namespaced_pod(NS, label_selector=f"leaderworkerset.sigs.k8s.io/name={name}").items


def wait_for_lws_pods_ready(cluster, name: str, count: int, message: str) -> None:
    """Wait until the LeaderWorkerSet has `count` pods, all Ready."""
    wait_for(lambda: len(pods := lws_pods(cluster, name)) == count and all(is_ready(p) for p in pods), message=message)


def lws_status_when(cluster, name: str, field: str, value) -> dict:
    """The LeaderWorkerSet's status once its `field` equals `value`."""

    def reached():
        status = cluster.custom.get_namespaced_custom_object_status(*LWS_GROUP, NS, "leaderworkersets", name)["status"]
        return status.get(field) == value and status

    return wait_for(reached, message="status")


def test_leaderworkerset_groups_labels_status_and_scale(make_cluster):
    cluster = make_cluster()
    cluster.custom.create_namespaced_custom_object(*LWS_GROUP, NS, "leaderworkersets", lws_body("mn", 2, 3))
    wait_for_lws_pods_ready(cluster, "mn", 6, "two groups of three Ready")
    names = sorted(p.metadata.name for p in lws_pods(cluster, "mn"))
    assert names == ["mn-0", "mn-0-1", "mn-0-2", "mn-1", "mn-1-1", "mn-1-2"]
    worker = next(p for p in lws_pods(cluster, "mn") if p.metadata.name == "mn-1-2")
    assert worker.metadata.labels["leaderworkerset.sigs.k8s.io/group-index"] == "1"
    assert worker.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "2"
    assert worker.metadata.annotations["leaderworkerset.sigs.k8s.io/leader-name"] == "mn-1"
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env["LWS_LEADER_ADDRESS"] == f"mn-1.mn.{NS}"
    assert (env["LWS_GROUP_SIZE"], env["LWS_WORKER_INDEX"]) == ("3", "2")
    status = lws_status_when(cluster, "mn", "readyReplicas", 2)
    assert status["replicas"] == 2
    assert status["hpaPodSelector"] == "leaderworkerset.sigs.k8s.io/name=mn,leaderworkerset.sigs.k8s.io/worker-index=0"
    cluster.custom.patch_namespaced_custom_object_scale(
        *LWS_GROUP, NS, "leaderworkersets", "mn", {"spec": {"replicas": 1}}
    )
    wait_for(
        lambda: sorted(p.metadata.name for p in lws_pods(cluster, "mn")) == ["mn-0", "mn-0-1", "mn-0-2"],
        message="scaled to one group",
    )


def test_leaderworkerset_recreates_a_group_when_a_member_crashes(make_cluster):
    cluster = make_cluster()
    cluster.custom.create_namespaced_custom_object(*LWS_GROUP, NS, "leaderworkersets", lws_body("mn", 1, 2))
    wait_for_lws_pods_ready(cluster, "mn", 2, "group Ready")
    leader_uid = cluster.core.read_namespaced_pod("mn-0", NS).metadata.uid
    cluster.faults("POST", {"namespace": NS, "pod": "mn-0-1"}, path="/kubesim/faults/crash")

    def recreated():
        pods = lws_pods(cluster, "mn")
        leader = [p for p in pods if p.metadata.name == "mn-0"]
        return leader and leader[0].metadata.uid != leader_uid and len(pods) == 2 and all(is_ready(p) for p in pods)

    wait_for(recreated, message="the whole group recreated")


def test_leaderworkerset_template_change_replaces_groups_one_at_a_time(make_cluster):
    cluster = make_cluster()
    cluster.custom.create_namespaced_custom_object(*LWS_GROUP, NS, "leaderworkersets", lws_body("mn", 2, 2))
    wait_for_lws_pods_ready(cluster, "mn", 4, "two groups Ready")
    revisions = {
        p.metadata.labels["leaderworkerset.sigs.k8s.io/template-revision-hash"] for p in lws_pods(cluster, "mn")
    }
    patch = {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": {"labels": {"v": "2"}}}}}}
    cluster.custom.patch_namespaced_custom_object(*LWS_GROUP, NS, "leaderworkersets", "mn", patch)

    def all_new():
        pods = lws_pods(cluster, "mn")
        return (
            len(pods) == 4
            and all(is_ready(p) and p.metadata.labels.get("v") == "2" for p in pods)
            and {p.metadata.labels["leaderworkerset.sigs.k8s.io/template-revision-hash"] for p in pods}
        )

    new_revisions = wait_for(all_new, message="every group on the new template")
    assert not new_revisions & revisions
    status = lws_status_when(cluster, "mn", "updatedReplicas", 2)
    assert status["readyReplicas"] == 2
