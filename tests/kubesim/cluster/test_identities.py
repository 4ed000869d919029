"""The cluster's components call the API server as their own identities, so `--authorization rbac`
governs them as it governs kubectl: each is bound to its bootstrap ClusterRole, and without that
binding it is refused and stops doing its work."""

import time

from kubernetes import client

from tests.kubesim.cluster_support import pod_manifest
from tests.polling import wait_for

NS = "default"
SCHEDULER_ROLE = "system:controller:default-scheduler"


def _node_of(cluster, name: str):
    return cluster.core.read_namespaced_pod(name, NS).spec.node_name


def _phase(cluster, name: str):
    return cluster.core.read_namespaced_pod(name, NS).status.phase


def test_under_rbac_the_components_run_pods_with_their_bootstrap_roles(make_cluster):
    cluster = make_cluster(authorization="rbac")
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    binding = rbac.read_cluster_role_binding(SCHEDULER_ROLE)
    assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [
        ("ServiceAccount", "kube-system", "default-scheduler")]
    cluster.core.create_namespaced_pod(NS, pod_manifest("web"))
    wait_for(lambda: _phase(cluster, "web") == "Running", message="pod Running under rbac")
    review = client.AuthorizationV1Api(cluster.api_client).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:kube-system:default-scheduler",
                 "resourceAttributes": {"verb": "create", "resource": "pods", "subresource": "binding",
                                        "namespace": NS}}})
    assert review.status.allowed is True
    assert SCHEDULER_ROLE in review.status.reason


def test_a_component_without_its_binding_is_refused_and_resumes_once_bound_again(make_cluster):
    cluster = make_cluster(authorization="rbac")
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    binding = rbac.read_cluster_role_binding(SCHEDULER_ROLE)
    rbac.delete_cluster_role_binding(SCHEDULER_ROLE)
    cluster.core.create_namespaced_pod(NS, pod_manifest("waits"))
    time.sleep(2.5)  # more than two of the scheduler's retries (1 s apart): it was refused each time
    assert _node_of(cluster, "waits") is None
    rbac.create_cluster_role_binding({"metadata": {"name": SCHEDULER_ROLE}, "roleRef": binding.role_ref.to_dict(),
                                      "subjects": [s.to_dict() for s in binding.subjects]})
    wait_for(lambda: _node_of(cluster, "waits") is not None, message="pod bound once the scheduler may again")


def test_with_open_authorization_a_missing_binding_changes_nothing(make_cluster):
    cluster = make_cluster()
    client.RbacAuthorizationV1Api(cluster.api_client).delete_cluster_role_binding(SCHEDULER_ROLE)
    cluster.core.create_namespaced_pod(NS, pod_manifest("free"))
    wait_for(lambda: _node_of(cluster, "free") is not None, message="pod bound under open authorization")
