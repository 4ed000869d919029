"""The product's label and annotation keys that kubesim reads too, so both spell them once."""

from __future__ import annotations

FIELD_PREFIX = "controlplane.io"
# On a serverless service's router pods: hold requests this many seconds while no engine is ready
# (activation); the control plane renders it and kubesim's routers honour it.
ACTIVATION_HOLD_ANNOTATION = f"{FIELD_PREFIX}/activation-hold-seconds"
