"""What of a service's status a tenant sees: the cluster's own words stay with platform staff.

Conditions and reconcile runs carry messages from three sources. Advice about the tenant's workload
(scheduling, crashes, a spec that cannot be rendered) is theirs to read. Messages from the cluster's API
or the control plane's internals (host names, webhook URLs, exception text) describe the platform, so
tenants get a summary of what happened and what to expect; staff see everything. Reasons are an
allow-list: a reason added later is summarised until someone decides its message is safe.
"""

from __future__ import annotations

from apps.core.access import is_platform_staff

# Reasons whose messages are written about the tenant's own workload or spec.
WORKLOAD_REASONS = frozenset({
    "Applied", "Scheduled", "Unschedulable", "Running", "CrashLoop", "AllReplicasReady", "ReplicasNotReady",
    "RenderFailed", "Loaded", "LoadRefused",  # LoRA adapters: the engine's answer about the tenant's adapter
})
SUMMARIES = {
    "TransientError": "The cluster's API could not be reached or asked to wait; the control plane retries "
                      "automatically.",
    "ApplyFailed": "The cluster refused the service's objects. Platform staff can see the cluster's message.",
}
DEFAULT_SUMMARY = "Something went wrong on the platform side. Platform staff can see the details."
# Reconcile run results whose message is a cluster or internal error as a whole (no reason prefix).
RUN_SUMMARIES = {"retrying": SUMMARIES["TransientError"], "error": DEFAULT_SUMMARY}


def tenant_message(reason: str, message: str) -> str:
    """The message a tenant reads for a condition or run with this reason."""
    if not message or reason in WORKLOAD_REASONS:
        return message
    return SUMMARIES.get(reason, DEFAULT_SUMMARY)


def conditions_for(user, conditions: list[dict] | None) -> list[dict]:
    """The service's conditions as `user` may read them (copies; the stored ones are untouched)."""
    conditions = list(conditions or [])
    if is_platform_staff(user):
        return conditions
    return [{**c, "message": tenant_message(c.get("reason", ""), c.get("message", ""))} for c in conditions]


def run_message_for(user, result: str, message: str) -> str:
    """A reconcile run's message as `user` may read it. Failed runs' messages are "Reason: text"."""
    if is_platform_staff(user) or not message:
        return message
    if result in RUN_SUMMARIES:
        return RUN_SUMMARIES[result]
    if result == "failed":
        reason, sep, text = message.partition(": ")
        if sep and reason.isidentifier():
            return f"{reason}: {tenant_message(reason, text)}"
        return DEFAULT_SUMMARY
    return message
