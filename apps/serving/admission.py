"""Admission: whether a service's replicas hold their tenant queue's GPUs, wait for them, or were preempted.

Where a cluster has Kueue, its Workload objects say (read back by the reconciler); elsewhere the control plane
admits replicas itself with the same policy, `capacity.kueue.admit`. Either way the outcome is stored on the
service (`InferenceService.admission`) and shown in the API, the portal and the autoscaler's decisions.
"""

from __future__ import annotations

from apps.tenancy.choices import AdmissionState

NOT_YET = "No admission pass has run since the service was created."


def admission_summary(stored: dict | None) -> dict:
    """{state, reason} of a service's stored admission, for the API and the pages; a service no pass has seen
    yet is waiting."""
    stored = stored or {}
    state = stored.get("state")
    if state not in AdmissionState.values:
        return {"state": AdmissionState.WAITING.value, "reason": NOT_YET}
    return {"state": state, "reason": stored.get("reason", "")}
