"""In-cluster credentials: the pod's projected ServiceAccount token and the cluster CA (workers and web alike).

Kubernetes rotates a projected token (by default within an hour) by swapping the file under the mount;
`ServiceAccountToken` is the client's `refresh_api_key_hook`, called before every request, and re-reads
the file whenever it changed, so a long-lived client never sends an expired token.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from kubernetes import client as k8s

TOKEN_FILE = "token"
CA_FILE = "ca.crt"
REREAD_SECONDS = 60.0


class InClusterCredentialsMissing(Exception):
    """The ServiceAccount token is not mounted (not running in a pod, or automounting is off)."""


class ServiceAccountToken:
    """Keeps a Configuration's bearer token equal to the token file's current contents."""

    def __init__(self, path: Path):
        self.path = path
        self._seen: tuple[int, int, int] | None = None  # (inode, mtime_ns, size) of the file last read
        self._read_at = 0.0
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, int, int]:
        # stat follows the `..data` symlink the kubelet swaps on rotation: a new token is a new inode.
        st = os.stat(self.path)
        return st.st_ino, st.st_mtime_ns, st.st_size

    def __call__(self, configuration: k8s.Configuration) -> None:
        try:
            stamp = self._stamp()
        except OSError as exc:
            raise InClusterCredentialsMissing(f"no ServiceAccount token at {self.path}: {exc.strerror}") from exc
        with self._lock:
            # Re-read on any change of the file, and at least every minute in case a change kept the same
            # size within one timestamp tick (the kubernetes client's own in-cluster loader's period).
            if stamp != self._seen or time.monotonic() - self._read_at > REREAD_SECONDS:
                configuration.api_key["authorization"] = self.path.read_text().strip()
                self._seen, self._read_at = stamp, time.monotonic()


def configure(configuration: k8s.Configuration, service_account_dir: str) -> None:
    """Point `configuration` at the mounted token (re-read on rotation) and CA bundle of `service_account_dir`."""
    directory = Path(service_account_dir)
    token = ServiceAccountToken(directory / TOKEN_FILE)
    configuration.api_key = {"authorization": ""}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    configuration.refresh_api_key_hook = token
    token(configuration)  # fail now, with a clear message, when nothing is mounted
    if (directory / CA_FILE).exists():
        configuration.ssl_ca_cert = str(directory / CA_FILE)  # the kubelet keeps this file current
