"""In-cluster credentials: a Cluster that uses the worker pod's own ServiceAccount token file and CA,
re-reading the token when it rotates. Tested against a kubesim that requires a bearer token, with the
token and CA written to a temporary directory as the kubelet would mount them."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import ValidationError

from apps.clusters.models import Cluster
from kubesim.apiserver.server import Server
from workers.kube import Kube
from workers.kubeerrors import PermanentClusterError

TOKEN = "sa-token-one"


@pytest.fixture
def kubesim_with_token():
    server = Server(port=0, token=TOKEN, seed=3).start_in_thread()
    yield server.url
    server.stop_in_thread()


def self_signed_ca_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture
def service_account_dir(tmp_path, settings):
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "ca.crt").write_text(self_signed_ca_pem())
    (tmp_path / "namespace").write_text("controlplane")
    settings.KUBERNETES_SERVICE_ACCOUNT_DIR = str(tmp_path)
    return tmp_path


def in_cluster(url: str) -> Cluster:
    # kubesim speaks plain HTTP, hence `insecure_simulator`; a real cluster is https://kubernetes.default.svc.
    return Cluster(name="home", api_url=url, in_cluster=True, insecure_simulator=True)


def namespaces(kube: Kube) -> list[str]:
    return [ns["metadata"]["name"] for ns in kube.list("v1", "Namespace")]


def test_a_cluster_reached_with_the_pods_token_and_ca(kubesim_with_token, service_account_dir):
    creds = in_cluster(kubesim_with_token).credentials()
    assert creds.service_account_dir == str(service_account_dir) and not creds.bearer_token
    with Kube(creds) as kube:
        assert "default" in namespaces(kube)
        assert kube._api.configuration.ssl_ca_cert == str(service_account_dir / "ca.crt")


def test_the_token_is_read_again_when_it_rotates(kubesim_with_token, service_account_dir):
    with Kube(in_cluster(kubesim_with_token).credentials()) as kube:
        assert "default" in namespaces(kube)
        # The kubelet swaps in a new token; the server (here) does not accept it, so the next call must
        # carry it and fail, without the client being rebuilt.
        (service_account_dir / "token").write_text("sa-token-rotated")
        with pytest.raises(PermanentClusterError) as refused:
            namespaces(kube)
        assert refused.value.status == 401
        (service_account_dir / "token").write_text(TOKEN)
        assert "default" in namespaces(kube)


def test_without_a_mounted_token_the_error_says_so(kubesim_with_token, tmp_path, settings):
    settings.KUBERNETES_SERVICE_ACCOUNT_DIR = str(tmp_path / "missing")
    with pytest.raises(PermanentClusterError) as missing:
        Kube(in_cluster(kubesim_with_token).credentials())
    assert missing.value.message == (
        f"no ServiceAccount token at {tmp_path / 'missing' / 'token'}: No such file or directory")


def test_in_cluster_credentials_need_no_token_but_refuse_one_given_as_well(db):
    Cluster(name="home", api_url="https://kubernetes.default.svc", in_cluster=True).full_clean()
    with pytest.raises(ValidationError) as both:
        Cluster(name="home", api_url="https://kubernetes.default.svc", in_cluster=True, bearer_token="x").full_clean()
    assert both.value.message_dict == {
        "in_cluster": ["In-cluster credentials replace the bearer token and kubeconfig: clear those or untick this."]}


def test_the_api_registers_an_in_cluster_cluster_and_reports_it(db):
    from rest_framework.test import APIClient

    from tests.factories import UserFactory

    api = APIClient()
    api.force_authenticate(UserFactory(is_staff=True))
    created = api.post("/api/v1/clusters/", {"name": "home", "api_url": "https://kubernetes.default.svc",
                                             "in_cluster": True}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["in_cluster"] is True and created.json()["has_bearer_token"] is False
    refused = api.post("/api/v1/clusters/", {"name": "other", "api_url": "https://kubernetes.default.svc",
                                             "in_cluster": True, "bearer_token": "t"}, format="json")
    assert refused.status_code == 400 and "in_cluster" in refused.json()
    assert Cluster.objects.filter(name="other").count() == 0
