"""Building a Kubernetes API client from a cluster's credentials: the one definition, used by the workers
(`workers/kube.py`). Reads no Django models; callers pass `Cluster.credentials()`."""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apps.clusters import incluster

if TYPE_CHECKING:
    from apps.clusters.models import ClusterCredentials


REQUEST_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5.0


class BoundedApiClient(k8s.ApiClient):
    """An ApiClient whose every request has a timeout: calls that name none (the dynamic client's discovery,
    for one) get `default_timeout`, a (connect, read) pair, so nothing waits on a cluster forever."""

    default_timeout: tuple[float, float] = (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)

    def call_api(self, *args, _request_timeout=None, **kwargs):
        return super().call_api(*args, _request_timeout=_request_timeout or self.default_timeout, **kwargs)


def _bounded(configuration: k8s.Configuration, timeout_seconds: float) -> BoundedApiClient:
    client = BoundedApiClient(configuration)
    client.default_timeout = (min(CONNECT_TIMEOUT_SECONDS, timeout_seconds), timeout_seconds)
    return client


def api_client(creds: ClusterCredentials, pool_size: int | None = None,
               timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> k8s.ApiClient:
    """An ApiClient for the cluster: from a kubeconfig when given, else URL + bearer token + CA bundle, or
    URL + the pod's own ServiceAccount token and CA (in-cluster). Requests that set no timeout of their own
    get `timeout_seconds` (read) and at most CONNECT_TIMEOUT_SECONDS to connect.

    `pool_size` bounds the connections kept per host; the client's default (5 x CPUs) would drop
    connections under a wider thread pool such as the scraper's.
    """
    configuration = k8s.Configuration()
    if pool_size:
        configuration.connection_pool_maxsize = pool_size
    if creds.kubeconfig:
        k8s_config.load_kube_config_from_dict(yaml.safe_load(creds.kubeconfig), client_configuration=configuration)
        return _bounded(configuration, timeout_seconds)
    configuration.host = creds.api_url.rstrip("/")
    if creds.bearer_token:
        configuration.api_key = {"authorization": creds.bearer_token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    if creds.service_account_dir:
        # Raises InClusterCredentialsMissing when nothing is mounted (the workers make it a permanent error).
        incluster.configure(configuration, creds.service_account_dir)
    if creds.ca_bundle:
        # The client wants a file path; the bundle lives encrypted in the database.
        handle = tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False)  # noqa: SIM115
        handle.write(creds.ca_bundle)
        handle.close()
        configuration.ssl_ca_cert = handle.name
    configuration.verify_ssl = creds.verify_tls
    configuration.retries = False
    return _bounded(configuration, timeout_seconds)
