"""What a failed call to a cluster means (workers/kube.py): every client exception leaves as a ClusterError, transient
(retry with backoff: unreachable, conflicts, throttling, server errors) or permanent (a Failed condition: invalid
objects, forbidden, a kind the cluster does not serve), with the API server's own words and its Retry-After."""

from __future__ import annotations

import urllib3
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

TRANSIENT_STATUS = {408, 409, 429, 500, 502, 503, 504}


class ClusterError(Exception):
    """A failed call to a cluster, with the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after


class TransientClusterError(ClusterError):
    """Unreachable API, conflicts, throttling, server errors: worth retrying."""


class PermanentClusterError(ClusterError):
    """Invalid objects, forbidden (quota), unknown kinds: retrying will not help."""


class KindNotServed(PermanentClusterError):
    """The cluster does not serve this apiVersion/kind (e.g. KEDA or LWS is not installed)."""


def classify(exc: BaseException) -> ClusterError:
    """Turn a client exception into a transient or permanent ClusterError with a readable message."""
    if isinstance(exc, ClusterError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(exc, (ApiException, DynamicApiError)) and status:
        message = _status_message(exc)
        retry_after = None
        headers = getattr(exc, "headers", None) or {}
        if headers.get("Retry-After"):
            try:
                retry_after = float(headers["Retry-After"])
            except ValueError:
                retry_after = None
        cls = TransientClusterError if status in TRANSIENT_STATUS else PermanentClusterError
        return cls(message, status=status, retry_after=retry_after)
    if isinstance(exc, ResourceNotFoundError):
        return KindNotServed(f"the cluster does not serve this kind: {exc}")
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError)):
        return TransientClusterError(f"cluster API unreachable: {exc.__class__.__name__}: {exc}")
    return PermanentClusterError(f"{exc.__class__.__name__}: {exc}")


def _status_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, (bytes, str)):
        try:
            parsed = yaml.safe_load(body)
            if isinstance(parsed, dict) and parsed.get("message"):
                return f"{parsed.get('reason') or exc.status}: {parsed['message']}"
        except yaml.YAMLError:
            pass
    summary = getattr(exc, "summary", None)
    if callable(summary):
        return summary()
    return f"HTTP {getattr(exc, 'status', '?')}: {getattr(exc, 'reason', exc)}"
