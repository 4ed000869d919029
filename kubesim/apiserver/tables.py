"""Server-side printing: `meta.k8s.io/v1` Tables for `kubectl get`, with the columns a real cluster shows.

kubectl asks for a Table (Accept `application/json;as=Table;v=v1;g=meta.k8s.io`) on list, get and watch
requests; answering with one gives `kubectl get pods` its READY/STATUS/RESTARTS/AGE columns. Kinds without
columns here get NAME/AGE, and custom resources their CRD's `additionalPrinterColumns`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from .resources import ResourceType
from .selectors import field_value, selector_from_label_selector

TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"

Column = tuple[str, str, str, int, Callable[[dict], object]]  # name, type, format, priority, cell


def wants_table(accept: str | None) -> bool:
    if not accept:
        return False
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")[1:]}
        if {"as=Table", "v=v1", "g=meta.k8s.io"} <= params:
            return True
    return False


def human_duration(seconds: float) -> str:
    """kubectl's `duration.HumanDuration`: 45s, 3m12s, 15m, 5h20m, 2d3h, 400d, 3y20d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age_of(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - then).total_seconds())


def _name(o: dict) -> str:
    return o["metadata"]["name"]


def _age(o: dict) -> str:
    return _age_of(o["metadata"].get("creationTimestamp"))


def _get(o: dict, path: str, default=None):
    v = field_value(o, path)
    return default if v is None else v


def _pod_ready(o: dict) -> str:
    statuses = _get(o, "status.containerStatuses", [])
    total = len(_get(o, "spec.containers", []))
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_status(o: dict) -> str:
    """The STATUS column as kubectl's pod printer derives it."""
    if o["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = o.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    if _get(o, "spec.schedulingGates"):
        reason = "SchedulingGated"
    for c in status.get("initContainerStatuses") or []:
        state = c.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode", 0) != 0:
            return "Init:" + (state["terminated"].get("reason") or "Error")
        if "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            return "Init:" + state["waiting"]["reason"]
    for c in reversed(status.get("containerStatuses") or []):
        state = c.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or (f"Signal:{t['signal']}" if t.get("signal") else
                                         f"ExitCode:{t.get('exitCode', 0)}")
    if reason == "Running" and any(not c.get("ready") for c in status.get("containerStatuses") or []) and \
            not any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
        return "Running"
    return reason


def _restarts(o: dict) -> int:
    return sum(c.get("restartCount", 0) for c in _get(o, "status.containerStatuses", []))


def _node_status(o: dict) -> str:
    ready = next((c for c in _get(o, "status.conditions", []) if c.get("type") == "Ready"), None)
    out = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if _get(o, "spec.unschedulable"):
        out += ",SchedulingDisabled"
    return out


def _node_roles(o: dict) -> str:
    roles = sorted(k.split("/", 1)[1] for k in (o["metadata"].get("labels") or {})
                   if k.startswith("node-role.kubernetes.io/") and "/" in k)
    return ",".join(roles) or "<none>"


def _ports(o: dict) -> str:
    ports = _get(o, "spec.ports", [])
    parts = []
    for p in ports:
        s = str(p.get("port"))
        if p.get("nodePort"):
            s += f":{p['nodePort']}"
        parts.append(f"{s}/{p.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _endpoints(o: dict) -> str:
    out = []
    for subset in o.get("subsets") or []:
        ports = subset.get("ports") or [{}]
        for addr in subset.get("addresses") or []:
            for port in ports:
                out.append(f"{addr.get('ip')}:{port.get('port')}" if port.get("port") else addr.get("ip", ""))
    if not out:
        return "<none>"
    return ",".join(out[:3]) + (f" + {len(out) - 3} more..." if len(out) > 3 else "")


def _images(o: dict) -> str:
    return ",".join(c.get("image", "") for c in _get(o, "spec.template.spec.containers", []))


def _containers(o: dict) -> str:
    return ",".join(c.get("name", "") for c in _get(o, "spec.template.spec.containers", []))


def _hpa_targets(o: dict) -> str:
    metrics = _get(o, "spec.metrics", [])
    current = _get(o, "status.currentMetrics", []) or []
    parts = []
    for i, m in enumerate(metrics):
        target = (m.get(m.get("type", "").lower() or "resource") or {}).get("target") or {}
        want = target.get("averageUtilization")
        want = f"{want}%" if want is not None else target.get("averageValue") or target.get("value") or "<unset>"
        have = "<unknown>"
        if i < len(current):
            cur = (current[i].get(current[i].get("type", "").lower()) or {}).get("current") or {}
            have = f"{cur['averageUtilization']}%" if "averageUtilization" in cur else \
                cur.get("averageValue") or cur.get("value") or "<unknown>"
        parts.append(f"{have}/{want}")
    return ", ".join(parts) or "<none>"


def _job_status(o: dict) -> str:
    """Complete or Failed once the Job has finished, else Running (kubectl's STATUS column)."""
    for condition in _get(o, "status.conditions", []) or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return condition["type"]
    return "Running"


NAME: Column = ("Name", "string", "name", 0, _name)
AGE: Column = ("Age", "string", "", 0, _age)

COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "namespaces"): [NAME, ("Status", "string", "", 0, lambda o: _get(o, "status.phase", "")), AGE],
    ("", "nodes"): [NAME, ("Status", "string", "", 0, _node_status), ("Roles", "string", "", 0, _node_roles), AGE,
                    ("Version", "string", "", 0, lambda o: _get(o, "status.nodeInfo.kubeletVersion", ""))],
    ("", "pods"): [NAME, ("Ready", "string", "", 0, _pod_ready), ("Status", "string", "", 0, _pod_status),
                   ("Restarts", "string", "", 0, lambda o: str(_restarts(o))), AGE,
                   ("IP", "string", "", 1, lambda o: _get(o, "status.podIP", "<none>")),
                   ("Node", "string", "", 1, lambda o: _get(o, "spec.nodeName", "<none>"))],
    ("", "services"): [NAME, ("Type", "string", "", 0, lambda o: _get(o, "spec.type", "ClusterIP")),
                       ("Cluster-IP", "string", "", 0, lambda o: _get(o, "spec.clusterIP", "<none>")),
                       ("External-IP", "string", "", 0, lambda o: ",".join(
                           i.get("ip") or i.get("hostname", "") for i in
                           _get(o, "status.loadBalancer.ingress", [])) or "<none>"),
                       ("Port(s)", "string", "", 0, _ports), AGE,
                       ("Selector", "string", "", 1, lambda o: ",".join(
                           f"{k}={v}" for k, v in sorted(_get(o, "spec.selector", {}).items())) or "<none>")],
    ("", "endpoints"): [NAME, ("Endpoints", "string", "", 0, _endpoints), AGE],
    ("", "configmaps"): [NAME, ("Data", "integer", "", 0,
                                lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})), AGE],
    ("", "secrets"): [NAME, ("Type", "string", "", 0, lambda o: o.get("type", "Opaque")),
                      ("Data", "integer", "", 0, lambda o: len(o.get("data") or {}) + len(o.get("stringData") or {})),
                      AGE],
    ("", "events"): [("Last Seen", "string", "", 0, lambda o: _age_of(
                         o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp"))),
                     ("Type", "string", "", 0, lambda o: o.get("type", "")),
                     ("Reason", "string", "", 0, lambda o: o.get("reason", "")),
                     ("Object", "string", "", 0, lambda o: f"{_get(o, 'involvedObject.kind', '').lower()}/"
                                                           f"{_get(o, 'involvedObject.name', '')}"),
                     ("Message", "string", "", 0, lambda o: (o.get("message") or "").strip())],
    ("", "persistentvolumeclaims"): [NAME, ("Status", "string", "", 0, lambda o: _get(o, "status.phase", "Pending")),
                                     ("Volume", "string", "", 0, lambda o: _get(o, "spec.volumeName", "")), AGE],
    ("apps", "deployments"): [
        NAME,
        ("Ready", "string", "", 0, lambda o: f"{_get(o, 'status.readyReplicas', 0)}/{_get(o, 'spec.replicas', 0)}"),
        ("Up-to-date", "integer", "", 0, lambda o: _get(o, "status.updatedReplicas", 0)),
        ("Available", "integer", "", 0, lambda o: _get(o, "status.availableReplicas", 0)),
        AGE,
        ("Containers", "string", "", 1, _containers),
        ("Images", "string", "", 1, _images),
        ("Selector", "string", "", 1, lambda o: selector_from_label_selector(_get(o, "spec.selector")) or "<none>"),
    ],
    ("apps", "replicasets"): [
        NAME,
        ("Desired", "integer", "", 0, lambda o: _get(o, "spec.replicas", 0)),
        ("Current", "integer", "", 0, lambda o: _get(o, "status.replicas", 0)),
        ("Ready", "integer", "", 0, lambda o: _get(o, "status.readyReplicas", 0)),
        AGE,
    ],
    ("apps", "statefulsets"): [
        NAME,
        ("Ready", "string", "", 0, lambda o: f"{_get(o, 'status.readyReplicas', 0)}/{_get(o, 'spec.replicas', 0)}"),
        AGE,
    ],
    ("batch", "jobs"): [
        NAME,
        ("Status", "string", "", 0, _job_status),
        ("Completions", "string", "", 0,
         lambda o: f"{_get(o, 'status.succeeded', 0)}/{_get(o, 'spec.completions', 1)}"),
        AGE,
    ],
    ("autoscaling", "horizontalpodautoscalers"): [
        NAME,
        ("Reference", "string", "", 0, lambda o: f"{_get(o, 'spec.scaleTargetRef.kind', '')}/"
                                                 f"{_get(o, 'spec.scaleTargetRef.name', '')}"),
        ("Targets", "string", "", 0, _hpa_targets),
        ("MinPods", "string", "", 0, lambda o: str(_get(o, "spec.minReplicas", 1))),
        ("MaxPods", "string", "", 0, lambda o: str(_get(o, "spec.maxReplicas", 0))),
        ("Replicas", "string", "", 0, lambda o: str(_get(o, "status.currentReplicas", 0))),
        AGE,
    ],
    ("scheduling.k8s.io", "priorityclasses"): [
        NAME,
        ("Value", "integer", "", 0, lambda o: o.get("value", 0)),
        ("Global-Default", "boolean", "", 0, lambda o: str(bool(o.get("globalDefault"))).lower()),
        AGE,
        ("PreemptionPolicy", "string", "", 0, lambda o: o.get("preemptionPolicy", "PreemptLowerPriority")),
    ],
}


_STEP = re.compile(r"\.?([^.\[]+)|\[\?\(@\.([\w.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\[(\d+)\]")


def json_path(obj: dict, path: str) -> object:
    """A printer column's JSONPath (`.status.x`, `[0]`, `[?(@.type=='Admitted')]`), as kubectl prints it: the
    matches joined by spaces, "" when there is none."""
    found = [obj]
    for m in _STEP.finditer(path.lstrip(".")):
        name, key, value, index = m.groups()
        if name is not None:
            found = [f[name] for f in found if isinstance(f, dict) and name in f]
        elif key is not None:
            found = [i for f in found if isinstance(f, list) for i in f
                     if isinstance(i, dict) and str(field_value(i, key)) == value]
        else:
            found = [f[int(index)] for f in found if isinstance(f, list) and len(f) > int(index)]
    if len(found) == 1:
        return found[0]
    return " ".join(str(f) for f in found)


def _crd_columns(crd: dict | None, version: str) -> list[Column] | None:
    if not crd:
        return None
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version and v.get("additionalPrinterColumns"):
            cols: list[Column] = [NAME]
            for c in v["additionalPrinterColumns"]:
                path = (c.get("jsonPath") or "").lstrip(".")
                if path == "metadata.creationTimestamp":
                    cols.append((c["name"], "date", "", c.get("priority", 0), _age))
                    continue
                cols.append((c["name"], c.get("type", "string"), c.get("format", ""), c.get("priority", 0),
                             lambda o, p=path: json_path(o, p)))
            return cols
    return None


def columns_for(rt: ResourceType, crd: dict | None = None) -> list[Column]:
    return COLUMNS.get((rt.group, rt.plural)) or _crd_columns(crd, rt.version) or [NAME, AGE]


def _cell(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else \
        ("" if value is None else str(value))


def row(columns: list[Column], obj: dict, include: str = "Metadata") -> dict:
    out: dict = {"cells": [_cell(c[4](obj)) for c in columns]}
    if include == "Object":
        out["object"] = obj
    elif include != "None":
        meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
        out["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    return out


def table(columns: list[Column], objects: list[dict], resource_version: str | None = None,
          include: str = "Metadata", with_columns: bool = True) -> dict:
    """A meta.k8s.io/v1 Table of `objects`; watch events after the first carry no column definitions."""
    out: dict = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}}
    if resource_version is not None:
        out["metadata"]["resourceVersion"] = resource_version
    out["columnDefinitions"] = [{"name": c[0], "type": c[1], "format": c[2], "description": "", "priority": c[3]}
                                for c in columns] if with_columns else []
    out["rows"] = [row(columns, o, include) for o in objects]
    return out
