"""The tenant's Hugging Face token in its namespace: the Secret `hf-token` (key `token`) that engine pods read as
HF_TOKEN (apps/serving/rendering/pods.py), applied from the tenant's encrypted field by each reconcile pass.

It is not among the rendered objects, so the token never appears in a render, a drift diff or a log: this module
reads the live Secret, writes it only when its value differs, and deletes it once the tenant has no token.
"""

from __future__ import annotations

import base64

from apps.serving.names import HF_TOKEN_KEY, HF_TOKEN_SECRET, tenant_labels
from workers.kube import Kube, ObjectRef


def secret_ref(namespace: str) -> ObjectRef:
    return ObjectRef("v1", "Secret", namespace, HF_TOKEN_SECRET)


def sync_hf_token(kube: Kube, tenant, namespace: str) -> str:
    """Make the namespace's `hf-token` Secret hold the tenant's token, or be absent without one. Returns what it
    did: "applied", "deleted" or "unchanged" (never the token)."""
    ref = secret_ref(namespace)
    live = kube.get(ref)
    if not tenant.hf_token:
        return "deleted" if live is not None and kube.delete(ref) else "unchanged"
    encoded = base64.b64encode(tenant.hf_token.encode()).decode()
    if live is not None and (live.get("data") or {}).get(HF_TOKEN_KEY) == encoded:
        return "unchanged"
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": HF_TOKEN_SECRET, "namespace": namespace, "labels": tenant_labels(tenant.slug)},
                "data": {HF_TOKEN_KEY: encoded}})
    return "applied"
