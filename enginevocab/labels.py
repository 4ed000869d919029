"""The product's label and annotation keys that kubesim reads too, so both spell them once."""

from __future__ import annotations

FIELD_PREFIX = "controlplane.io"
# On a serverless service's router pods: hold requests this many seconds while no engine is ready
# (activation); the control plane renders it and kubesim's routers honour it.
ACTIVATION_HOLD_ANNOTATION = f"{FIELD_PREFIX}/activation-hold-seconds"
# On the pods and objects of a canary unit (the new revision running beside the stable one): its revision
# number. Stable pods carry none.
REVISION_LABEL = f"{FIELD_PREFIX}/revision"
# On a router pod during a canary rollout: "<revision>=<percent>", the share of requests the pods labelled
# with that revision get (the others share the rest); the control plane renders it, kubesim's routers honour it.
CANARY_WEIGHTS_ANNOTATION = f"{FIELD_PREFIX}/canary-weights"


def canary_weights_value(revision: int, percent: int) -> str:
    return f"{revision}={percent}"


def parse_canary_weights(value: str | None) -> dict[str, int]:
    """{revision label value: percent} from the annotation; empty when absent or malformed."""
    shares: dict[str, int] = {}
    for part in (value or "").split(","):
        revision, sep, percent = part.strip().partition("=")
        if sep and revision and percent.isdigit() and 0 <= int(percent) <= 100:
            shares[revision] = int(percent)
    return shares
