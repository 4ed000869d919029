"""Revisions: what a service's pods run, numbered per service, and rolling back to one of them.

"Touches pods" has one definition, `pod_fingerprint`: the template hashes (`rendering.pods.template_hash`,
annotated on every rendered workload) of every pod template the service renders to, and the adapter set (the
adapters loaded at run time change no template, but what the pods serve). A save whose
fingerprint differs from the one before it makes a new revision (`actions.save_service`); replicas, their
bounds and autoscaling targets do not enter any pod template, so they make none. The revision keeps
`pod_spec(service)`, the fields that feed the templates, so a rollback can set them again.
"""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

from django.contrib.contenttypes.models import ContentType

from apps.core.audit_display import Change, describe_changes
from apps.core.ids import ascii_int
from apps.serving.models import InferenceService, Revision
from apps.serving.names import TEMPLATE_HASH_ANNOTATION
from apps.serving.rendering.spec import PoolSpec

# The pool fields a pod template is made of; replicas and bounds are kept only to restore a missing pool.
POD_POOL_FIELDS = ("gpu_type", "gpus_per_replica", "nodes_per_replica")
BOUND_FIELDS = ("replicas", "min_replicas", "max_replicas")


class RollbackRefused(Exception):
    """The revision cannot be made current (it already is, or what it names is gone); answered 409."""


def pod_fingerprint(service: InferenceService) -> str:
    """A digest of every rendered pod template of the saved service (what Kubernetes would roll)."""
    from apps.serving.rendering import render_service
    from apps.serving.rendering.spec import spec_from_service

    try:
        objects = render_service(spec_from_service(service))
    except ValueError:  # a stored spec the renderer refuses: its fields stand for its templates
        return hashlib.sha256(json.dumps(pod_spec(service), sort_keys=True).encode()).hexdigest()
    hashes = sorted(
        f'{o["kind"]}/{o["metadata"]["name"]}={o["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]}'
        for o in objects if TEMPLATE_HASH_ANNOTATION in o["metadata"].get("annotations", {})
    )
    # Adapters loaded at run time (`rendering.loras`) are in no template; their set still makes a revision.
    hashes.append(f"adapters={sorted(a.pk for a in service.spec_adapters())}")
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()


def pod_spec(service: InferenceService) -> dict:
    """The service's fields that feed its pod templates, as the revision stores them."""
    return {
        "model": service.model_id,
        "runtime": service.runtime_id,
        "adapters": sorted(a.pk for a in service.spec_adapters()),
        "deployment_mode": service.deployment_mode,
        "engine_settings": service.engine_settings,
        "routing_policy": service.routing_policy,
        "pools": sorted(
            ({"role": p.role, **{f: getattr(p, f) for f in (*POD_POOL_FIELDS, *BOUND_FIELDS)}}
             for p in service.spec_pools()),
            key=lambda p: p["role"],
        ),
    }


def record_revision(service: InferenceService, *, before: str | None, entry, restored_from: int | None = None):
    """After a save: a new revision if the pod templates changed (or the service is new), else None."""
    if before is not None and before == pod_fingerprint(service):
        return None
    last = service.revisions.order_by("-number").values_list("number", flat=True).first() or 0
    return Revision.objects.create(
        service=service, number=last + 1, spec=pod_spec(service), actor=entry.actor, actor_repr=entry.actor_repr,
        audit_entry=entry, restored_from=restored_from,
    )


def number_of(value) -> int:
    """A revision number from a URL or query (ASCII digits), ValueError outside 1 … 2^31 - 1 (the column's range)."""
    number = ascii_int(value)
    if number is None or not 0 < number < 2**31:
        raise ValueError(f"{value} is not a revision number")
    return number


def _comparable(spec: dict) -> dict:
    """A stored spec without replicas and bounds (they are not what the pods run)."""
    pools = [{k: v for k, v in p.items() if k not in BOUND_FIELDS} for p in spec.get("pools", [])]
    return {**spec, "pools": pools}


def same_pods(a: dict, b: dict) -> bool:
    """Whether two revisions' specs run the same pods (replicas and bounds aside)."""
    return _comparable(a) == _comparable(b)


def changes(old: dict | None, new: dict) -> list[Change]:
    """What differs between two revisions' specs, in the audit's words (related objects by name)."""
    entry = SimpleNamespace(content_type=ContentType.objects.get_for_model(InferenceService), content_type_id=1,
                            before=_comparable(old) if old is not None else None, after=_comparable(new))
    return describe_changes(entry)


def rollback_target(service: InferenceService, revision: Revision) -> tuple[InferenceService, list[PoolSpec], list]:
    """The service set to `revision`'s pod spec (current pools keep their replicas and bounds), its pools
    and adapters, ready for `save_service`; RollbackRefused when that would change nothing or cannot be."""
    from apps.catalog.models import Adapter, Model, Runtime

    spec = revision.spec
    if _comparable(spec) == _comparable(pod_spec(service)):
        raise RollbackRefused(f"Revision {revision.number} is what the service runs already.")
    if not Model.objects.filter(pk=spec["model"]).exists() or not Runtime.objects.filter(pk=spec["runtime"]).exists():
        raise RollbackRefused(f"Revision {revision.number} names a model or runtime that has been deleted.")
    adapters = list(Adapter.objects.filter(pk__in=spec["adapters"]))
    if len(adapters) != len(spec["adapters"]):
        raise RollbackRefused(f"Revision {revision.number} names an adapter that has been deleted.")
    service.model_id, service.runtime_id = spec["model"], spec["runtime"]
    for name in ("deployment_mode", "engine_settings", "routing_policy"):
        setattr(service, name, spec[name])
    live = {p.role: p for p in service.pools.all()}
    pools = []
    for stored in spec["pools"]:
        bounds = {f: getattr(live[stored["role"]], f) for f in BOUND_FIELDS} if stored["role"] in live else {
            f: stored[f] for f in BOUND_FIELDS}
        pools.append(PoolSpec(role=stored["role"], **{f: stored[f] for f in POD_POOL_FIELDS}, **bounds))
    return service, pools, adapters

