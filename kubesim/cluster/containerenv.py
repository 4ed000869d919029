"""What the kubelet derives from a pod spec before starting a container: its environment (values,
`$(VAR)` expansion, ConfigMaps, Secrets, downward API) and the pod's QoS class."""

from __future__ import annotations

import base64


def qos_class(pod: dict) -> str:
    """Guaranteed when requests equal limits for cpu and memory everywhere, else Burstable or BestEffort."""
    containers = (pod.get("spec") or {}).get("containers") or []
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        any_set = any_set or bool(limits) or bool(requests)
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class ContainerConfigError(Exception):
    """A referenced ConfigMap, Secret or key is missing: the container cannot be created yet."""


def env_sources(container: dict) -> set[tuple[str, str]]:
    """The ConfigMaps and Secrets a container's env and envFrom refer to, as (kind, name)."""
    out = set()
    for item in container.get("env") or []:
        value_from = item.get("valueFrom") or {}
        for kind, ref in (("configmaps", "configMapKeyRef"), ("secrets", "secretKeyRef")):
            if (value_from.get(ref) or {}).get("name"):
                out.add((kind, value_from[ref]["name"]))
    for item in container.get("envFrom") or []:
        for kind, ref in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            if (item.get(ref) or {}).get("name"):
                out.add((kind, item[ref]["name"]))
    return out


def source_data(obj: dict | None) -> dict[str, str] | None:
    """The key/value data of a ConfigMap or Secret (Secret data base64-decoded)."""
    if obj is None:
        return None
    if obj.get("kind") == "Secret":
        data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
        data.update(obj.get("stringData") or {})
        return data
    return {k: str(v) for k, v in (obj.get("data") or {}).items()}


def _expand(value: str, env: dict[str, str]) -> str:
    for known, known_value in env.items():
        value = value.replace(f"$({known})", known_value)
    return value


def resolve_env(
    container: dict,
    pod: dict,
    pod_ip: str,
    node_name: str,
    host_ip: str = "",
    sources: dict[tuple[str, str], dict[str, str] | None] | None = None,
) -> dict[str, str]:
    """The container's environment: envFrom, literal values with `$(VAR)` expansion, ConfigMap and
    Secret keys, and downward-API fields. Raises ContainerConfigError for a missing reference."""
    meta = pod.get("metadata") or {}
    sources = sources or {}
    env: dict[str, str] = {}
    for item in container.get("envFrom") or []:
        for kind, ref, singular in (("configmaps", "configMapRef", "configmap"), ("secrets", "secretRef", "secret")):
            name = (item.get(ref) or {}).get("name")
            if not name:
                continue
            data = sources.get((kind, name))
            if data is None:
                if not (item.get(ref) or {}).get("optional"):
                    raise ContainerConfigError(f'{singular} "{name}" not found')
                continue
            prefix = item.get("prefix") or ""
            env.update({prefix + key: value for key, value in data.items()})
    downward = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": node_name,
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.hostIP": host_ip,
    }
    for item in container.get("env") or []:
        name = item.get("name")
        if not name:
            continue
        if "value" in item or "valueFrom" not in item:
            env[name] = _expand(str(item.get("value") or ""), env)
            continue
        value_from = item.get("valueFrom") or {}
        field_path = (value_from.get("fieldRef") or {}).get("fieldPath")
        if field_path in downward:
            env[name] = str(downward[field_path] or "")
        elif field_path and field_path.startswith(("metadata.labels['", "metadata.annotations['")):
            source = meta.get("labels" if "labels" in field_path else "annotations") or {}
            env[name] = str(source.get(field_path.split("'")[1], ""))
        for kind, ref, singular in (
            ("configmaps", "configMapKeyRef", "configmap"),
            ("secrets", "secretKeyRef", "secret"),
        ):
            key_ref = value_from.get(ref)
            if not key_ref:
                continue
            data = sources.get((kind, key_ref.get("name")))
            if data is None or key_ref.get("key") not in data:
                if key_ref.get("optional"):
                    continue
                if data is None:
                    raise ContainerConfigError(f'{singular} "{key_ref.get("name")}" not found')
                raise ContainerConfigError(
                    f"couldn't find key {key_ref.get('key')} in {singular.capitalize()} "
                    f"{meta.get('namespace')}/{key_ref.get('name')}"
                )
            env[name] = data[key_ref["key"]]
    return env
