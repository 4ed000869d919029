"""ServiceAccount tokens, RBAC enforcement (--authorization rbac) and access reviews (kubectl auth can-i)."""

from __future__ import annotations

import json
import subprocess
import sys

import jwt
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import api_client_for, deployment

RBAC_GROUP = "rbac.authorization.k8s.io"


@pytest.fixture(scope="module")
def rbac_server(kubesim_factory):
    """A server enforcing RBAC with namespace `team`, ServiceAccount `bot` and a Role letting it read pods."""
    server = kubesim_factory(authorization="rbac")
    with api_client_for(server) as admin:  # no credentials on a server without --token: the admin
        core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
        for ns in ("team", "other"):
            core.create_namespace({"metadata": {"name": ns}})
        core.create_namespaced_service_account("team", {"metadata": {"name": "bot"}})
        rbac.create_namespaced_role("team", {"metadata": {"name": "pod-reader"}, "rules": [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}]})
        rbac.create_namespaced_role_binding("team", {
            "metadata": {"name": "bot-reads"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]})
    return server


def _token(server, namespace="team", name="bot", **spec) -> str:
    with api_client_for(server) as admin:
        made = client.CoreV1Api(admin).create_namespaced_service_account_token(
            name, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(**spec)))
    return made.status.token


def _error(caught) -> dict:
    return json.loads(caught.value.body)


def test_token_request_issues_a_service_account_token(rbac_server):
    token = _token(rbac_server, audiences=[], expiration_seconds=1200)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "system:serviceaccount:team:bot"
    assert claims["kubernetes.io"]["serviceaccount"]["name"] == "bot"
    assert claims["exp"] - claims["iat"] == 1200
    with api_client_for(rbac_server, token) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review({})
    assert review.status.user_info.username == "system:serviceaccount:team:bot"
    assert set(review.status.user_info.groups) == {"system:serviceaccounts", "system:serviceaccounts:team",
                                                    "system:authenticated"}


def test_token_request_refuses_short_durations_and_unknown_accounts(rbac_server):
    with pytest.raises(ApiException) as caught:
        _token(rbac_server, audiences=[], expiration_seconds=60)
    assert caught.value.status == 422
    assert "may not specify a duration less than 10 minutes" in _error(caught)["message"]
    with pytest.raises(ApiException) as caught:
        _token(rbac_server, name="nobody", audiences=[])
    assert caught.value.status == 404
    assert _error(caught)["message"] == 'serviceaccounts "nobody" not found'


def test_rbac_allows_what_a_role_grants_and_forbids_the_rest(rbac_server):
    with api_client_for(rbac_server, _token(rbac_server, audiences=[])) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        assert core.list_namespaced_pod("team").items == []
        with pytest.raises(ApiException) as caught:
            apps.list_namespaced_deployment("team")
        assert caught.value.status == 403
        assert _error(caught)["reason"] == "Forbidden"
        assert _error(caught)["message"] == (
            'deployments.apps is forbidden: User "system:serviceaccount:team:bot" cannot list resource '
            '"deployments" in API group "apps" in the namespace "team"')
        with pytest.raises(ApiException) as caught:
            core.list_namespaced_pod("other")
        assert _error(caught)["message"] == (
            'pods is forbidden: User "system:serviceaccount:team:bot" cannot list resource "pods" in API group "" '
            'in the namespace "other"')
        with pytest.raises(ApiException) as caught:
            core.delete_namespaced_pod("p", "team")
        assert _error(caught)["message"] == (
            'pods "p" is forbidden: User "system:serviceaccount:team:bot" cannot delete resource "pods" in API '
            'group "" in the namespace "team"')
        with pytest.raises(ApiException) as caught:
            core.list_node()
        assert _error(caught)["message"].endswith('cannot list resource "nodes" in API group "" at the cluster scope')


def test_bad_or_revoked_tokens_are_401(rbac_server):
    with api_client_for(rbac_server, "not-a-token") as api, pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).list_namespaced_pod("team")
    assert caught.value.status == 401
    with api_client_for(rbac_server) as admin:
        core = client.CoreV1Api(admin)
        core.create_namespaced_service_account("team", {"metadata": {"name": "temp"}})
        token = _token(rbac_server, name="temp", audiences=[])
        core.delete_namespaced_service_account("temp", "team")
        core.create_namespaced_service_account("team", {"metadata": {"name": "temp"}})  # a new uid
    with api_client_for(rbac_server, token) as api, pytest.raises(ApiException) as caught:
        client.AuthenticationV1Api(api).create_self_subject_review({})
    assert caught.value.status == 401


def test_self_subject_access_review_answers_from_rbac(rbac_server):
    with api_client_for(rbac_server, _token(rbac_server, audiences=[])) as api:
        authz = client.AuthorizationV1Api(api)

        def ask(verb, resource, group="", namespace="team"):
            return authz.create_self_subject_access_review({"spec": {"resourceAttributes": {
                "verb": verb, "resource": resource, "group": group, "namespace": namespace}}}).status

        allowed = ask("list", "pods")
        assert allowed.allowed is True
        assert allowed.reason == ('RBAC: allowed by RoleBinding "bot-reads/team" of Role "pod-reader" to '
                                  'ServiceAccount "bot/team"')
        assert ask("create", "deployments", "apps").allowed is False
        assert ask("list", "pods", namespace="other").allowed is False


def test_subject_access_review_and_cluster_roles_with_aggregation(rbac_server):
    with api_client_for(rbac_server) as admin:
        rbac, authz = client.RbacAuthorizationV1Api(admin), client.AuthorizationV1Api(admin)
        rbac.create_cluster_role({"metadata": {"name": "deploy-viewer", "labels": {"aggregate-to-ops": "true"}},
                                  "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                                             "verbs": ["get", "list"]}]})
        rbac.create_cluster_role({"metadata": {"name": "ops"}, "aggregationRule": {
            "clusterRoleSelectors": [{"matchLabels": {"aggregate-to-ops": "true"}}]}})
        rbac.create_cluster_role_binding({
            "metadata": {"name": "ops-group"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "ops"},
            "subjects": [{"kind": "Group", "name": "ops-people", "apiGroup": RBAC_GROUP}]})

        def review(user, groups, verb):
            return authz.create_subject_access_review({"spec": {"user": user, "groups": groups, "resourceAttributes": {
                "verb": verb, "resource": "deployments", "group": "apps", "namespace": "other"}}}).status

        status = review("alice", ["ops-people"], "list")
        assert status.allowed is True
        assert status.reason == 'RBAC: allowed by ClusterRoleBinding "ops-group" of ClusterRole "ops" to Group "ops-people"'
        assert review("alice", ["ops-people"], "delete").allowed is False
        assert review("bob", [], "list").allowed is False
        with pytest.raises(ApiException) as caught:
            authz.create_subject_access_review({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
        assert caught.value.status == 422


def test_kubectl_auth_can_i_and_impersonation(rbac_server, kubectl):
    sa = "system:serviceaccount:team:bot"
    proc = kubectl("auth", "can-i", "list", "pods", "-n", "team", "--as", sa, server=rbac_server, check=False)
    assert (proc.returncode, proc.stdout.strip()) == (0, "yes")
    proc = kubectl("auth", "can-i", "create", "deployments", "-n", "team", "--as", sa, server=rbac_server,
                   check=False)
    assert (proc.returncode, proc.stdout.strip()) == (1, "no")
    assert kubectl("auth", "can-i", "create", "deployments", server=rbac_server).stdout.strip() == "yes"  # admin
    proc = kubectl("get", "deployments", "-n", "team", "--as", sa, server=rbac_server, check=False)
    assert proc.returncode == 1
    assert ('Error from server (Forbidden): deployments.apps is forbidden: User "system:serviceaccount:team:bot" '
            'cannot list resource "deployments" in API group "apps" in the namespace "team"') in proc.stderr
    assert "No resources found" in kubectl("get", "pods", "-n", "team", "--as", sa, server=rbac_server).stderr


def test_a_service_account_cannot_impersonate(rbac_server):
    with api_client_for(rbac_server, _token(rbac_server, audiences=[])) as api:
        api.set_default_header("Impersonate-User", "system:serviceaccount:kube-system:admin")
        with pytest.raises(ApiException) as caught:
            client.CoreV1Api(api).list_namespaced_pod("team")
    assert caught.value.status == 403
    assert _error(caught)["message"] == (
        'serviceaccounts "admin" is forbidden: User "system:serviceaccount:team:bot" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "kube-system"')


def test_cli_token_and_open_mode(kubesim_factory):
    server = kubesim_factory()  # authorization "open": nothing enforced, reviews still answer from RBAC
    with api_client_for(server) as admin:
        client.CoreV1Api(admin).create_namespaced_service_account("default", {"metadata": {"name": "cli"}})
    proc = subprocess.run([sys.executable, "-m", "kubesim", "token", "--sa", "default/cli", "--server", server.url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    with api_client_for(server, token) as api:
        client.AppsV1Api(api).create_namespaced_deployment("default", deployment("open-mode"))
        status = client.AuthorizationV1Api(api).create_self_subject_access_review({"spec": {"resourceAttributes": {
            "verb": "create", "resource": "deployments", "group": "apps", "namespace": "default"}}}).status
        assert status.allowed is False
    proc = subprocess.run([sys.executable, "-m", "kubesim", "token", "--sa", "default/ghost", "--server", server.url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == 'error: serviceaccounts "ghost" not found'


def test_kubectl_sends_service_account_tokens_to_a_tls_server(kubesim_factory, tmp_path):
    server = kubesim_factory(authorization="rbac", tls=True)
    assert server.url.startswith("https://")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)  # the self-signed certificate the server made at start
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = server.url, str(ca)
    with client.ApiClient(cfg) as admin:
        core = client.CoreV1Api(admin)
        core.create_namespaced_service_account("default", {"metadata": {"name": "tls-bot"}})
        client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding("default", {
            "metadata": {"name": "tls-bot-admin"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "tls-bot", "namespace": "default"}]})
    token = subprocess.run([sys.executable, "-m", "kubesim", "token", "--sa", "default/tls-bot", "--server", server.url],
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()

    def kubectl(*args):
        return subprocess.run(["kubectl", "--server", server.url, "--insecure-skip-tls-verify", "--token", token,
                               "--cache-dir", str(tmp_path / "kcache"), *args], capture_output=True, text=True,
                              timeout=60)

    assert kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == \
        "system:serviceaccount:default:tls-bot"
    assert kubectl("get", "configmaps", "-n", "default").returncode == 0  # cluster-admin bound in default
    denied = kubectl("get", "configmaps", "-n", "kube-system")
    assert denied.returncode == 1
    assert ('configmaps is forbidden: User "system:serviceaccount:default:tls-bot" cannot list resource '
            '"configmaps" in API group "" in the namespace "kube-system"') in denied.stderr
