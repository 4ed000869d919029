"""The HorizontalPodAutoscaler controller (autoscaling/v2) for kubesim.

Every sync period it reads the target's scale subresource, measures `Pods` metrics by scraping each
ready pod's `/metrics` (Prometheus text, as a custom-metrics adapter would serve them), and applies
the upstream algorithm: desired = ceil(current ready pods x current/target) outside a 10 % tolerance,
the highest recommendation across metrics, clamped to min/max, scale-up limited by the default
policies (max of +4 pods and +100 % per period) and scale-down stabilised over
`behavior.scaleDown.stabilizationWindowSeconds` (300 s by default). `Resource` metrics (cpu, memory)
need a metrics server kubesim does not have: such HPAs report `ScalingActive=False` as a cluster
without metrics-server does, and only enforce min/max replicas.
"""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.quantities import parse_quantity
from kubesim.apiserver.selectors import parse_label_selector
from kubesim.cluster.controllers.base import Controller, Informer, key_of
from kubesim.cluster.controllers.common import pod_ready, set_condition, write_status
from kubesim.cluster.events import now

HPAS = "autoscaling/v2/horizontalpodautoscalers"
COMPONENT = "horizontal-pod-autoscaler"
TOLERANCE = 0.1


def format_quantity(value: float) -> str:
    """A metric value as a Kubernetes quantity ("4", "1500m")."""
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{math.ceil(value * 1000)}m"


def replicas_for(ratio: float, ready: int, current: int) -> int:
    """The upstream per-metric recommendation: unchanged within the tolerance, else ceil(ratio x ready)."""
    if abs(1.0 - ratio) <= TOLERANCE:
        return current
    return math.ceil(ratio * ready)


def sample_value(text: str, metric: str, labels: dict[str, str]) -> float | None:
    """The sum of the samples named `metric` (or `metric` without its `_total`) matching `labels`."""
    total, found = 0.0, False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in (metric, metric + "_total") and family.name != metric:
                continue
            if sample.name.endswith(("_created", "_bucket", "_count", "_sum")) and sample.name != metric:
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                found = True
    return total if found else None


class HorizontalPodAutoscalerController(Controller):
    name = COMPONENT

    def __init__(self, api, recorder, hpas: Informer, pods: Informer, kubelet, sync_seconds: float = 15.0):
        super().__init__()
        self.api, self.recorder, self.hpas, self.pods, self.kubelet = api, recorder, hpas, pods, kubelet
        self.sync_seconds = sync_seconds
        self._recommendations: dict[tuple, list[tuple[float, int]]] = {}
        self._session: aiohttp.ClientSession | None = None
        hpas.handlers.append(lambda _t, hpa, _old: self.enqueue(key_of(hpa)))

    async def tick(self) -> None:
        """Re-evaluate every HPA each sync period (the controller's --horizontal-pod-autoscaler-sync-period)."""
        while True:
            await asyncio.sleep(self.sync_seconds)
            self.enqueue_many(key_of(hpa) for hpa in self.hpas.list())

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _scrape(self, pod: dict) -> str | None:
        meta = pod["metadata"]
        port = self.kubelet.port(meta.get("namespace") or "default", meta["name"], None)
        if port is None:
            return None
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2))
        try:
            async with self._session.get(f"http://127.0.0.1:{port}/metrics") as response:
                return await response.text() if response.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None

    async def _pods_metric(self, spec: dict, pods: list[dict]) -> tuple[float, int] | None:
        """(average value over the pods that report it, how many do), or None when none does."""
        metric = spec.get("metric") or {}
        labels = (metric.get("selector") or {}).get("matchLabels") or {}
        values = []
        for pod in pods:
            text = await self._scrape(pod)
            value = sample_value(text, metric.get("name", ""), labels) if text else None
            if value is not None:
                values.append(value)
        if not values:
            return None
        return sum(values) / len(values), len(values)

    async def reconcile(self, key) -> None:
        hpa = self.hpas.get(*key)
        if hpa is None:
            self._recommendations.pop(key, None)
            return
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        namespace = key[0]
        target = self.api.store.registry.by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        conditions = (hpa.get("status") or {}).get("conditions") or []
        try:
            if target is None:
                raise ApiError.path_not_found()
            self.api.authorize("get", target, namespace, ref.get("name"), "scale")
            scale = self.api.store.get(target, namespace, ref.get("name"), subresource="scale")
        except ApiError as error:
            conditions = set_condition(
                conditions,
                "AbleToScale",
                "False",
                "FailedGetScale",
                f"the HPA controller was unable to get the target's current scale: {error.message}",
            )
            await self._write(hpa, {"currentReplicas": 0, "desiredReplicas": 0, "conditions": conditions})
            return
        conditions = set_condition(
            conditions,
            "AbleToScale",
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
        )
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        minimum, maximum = int(spec.get("minReplicas", 1)), int(spec.get("maxReplicas", 1))
        match = parse_label_selector((scale.get("status") or {}).get("selector") or "")
        pods = [p for p in self.pods.list(namespace) if match is not None and match(p) and pod_ready(p)]
        metrics_status: list[dict] = []
        desired, reason = current, ""
        if current == 0 and minimum != 0:
            conditions = set_condition(
                conditions,
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            )
        elif current > maximum:
            desired, reason = maximum, "Current number of replicas above Spec.MaxReplicas"
        elif current < minimum:
            desired, reason = minimum, "Current number of replicas below Spec.MinReplicas"
        else:
            desired, reason, metrics_status, conditions = await self._from_metrics(spec, pods, current, conditions)
            desired, conditions = self._limit(key, spec, current, desired, minimum, maximum, conditions)
        status = {
            "observedGeneration": hpa["metadata"].get("generation", 1),
            "currentReplicas": current,
            "desiredReplicas": desired,
            "conditions": conditions,
        }
        if metrics_status:
            status["currentMetrics"] = metrics_status
        last_scale = (hpa.get("status") or {}).get("lastScaleTime")
        if last_scale:
            status["lastScaleTime"] = last_scale
        if desired != current:
            self.api.authorize("patch", target, namespace, ref["name"], "scale")
            self.api.store.patch(
                target,
                namespace,
                ref["name"],
                {"spec": {"replicas": desired}},
                "merge",
                subresource="scale",
                field_manager=COMPONENT,
            )
            status["lastScaleTime"] = now()
            await self.recorder.record(
                hpa, "SuccessfulRescale", f"New size: {desired}; reason: {reason}", component=COMPONENT
            )
        await self._write(hpa, status)

    async def _from_metrics(self, spec: dict, pods: list[dict], current: int, conditions: list[dict]):
        desired, reason, statuses, failures = -1, "", [], []
        for metric in spec.get("metrics") or []:
            kind = metric.get("type")
            if kind == "Pods":
                pods_spec = metric.get("pods") or {}
                name = (pods_spec.get("metric") or {}).get("name", "")
                measured = await self._pods_metric(pods_spec, pods)
                target = parse_quantity((pods_spec.get("target") or {}).get("averageValue", "0") or "0")
                if measured is None or target <= 0:
                    failures.append(
                        (
                            "FailedGetPodsMetric",
                            f"the HPA was unable to compute the replica count: "
                            f"unable to get metric {name}: no metrics returned for pods",
                        )
                    )
                    continue
                average, reporting = measured
                recommendation = replicas_for(average / target, reporting, current)
                statuses.append(
                    {
                        "type": "Pods",
                        "pods": {"metric": {"name": name}, "current": {"averageValue": format_quantity(average)}},
                    }
                )
                if recommendation > desired:
                    direction = "above" if average > target else "below"
                    desired, reason = recommendation, f"pods metric {name} {direction} target"
            elif kind == "Resource":
                resource = (metric.get("resource") or {}).get("name", "cpu")
                failures.append(
                    (
                        "FailedGetResourceMetric",
                        f"the HPA was unable to compute the replica count: failed to get {resource} "
                        f"utilization: unable to get metrics for resource {resource}: no metrics "
                        "returned from resource metrics API",
                    )
                )
            else:
                failures.append(
                    (
                        f"FailedGet{kind}Metric",
                        f"the HPA was unable to compute the replica count: {kind} metrics are not served by kubesim",
                    )
                )
        if desired < 0:
            why, message = failures[0] if failures else ("ScalingDisabled", "no metrics to scale on")
            conditions = set_condition(conditions, "ScalingActive", "False", why, message)
            return current, "", statuses, conditions
        conditions = set_condition(
            conditions,
            "ScalingActive",
            "True",
            "ValidMetricFound",
            "the HPA was able to successfully calculate a replica count from pods metric",
        )
        return desired, reason, statuses, conditions

    def _limit(
        self, key, spec: dict, current: int, desired: int, minimum: int, maximum: int, conditions: list[dict]
    ) -> tuple[int, list[dict]]:
        behavior = spec.get("behavior") or {}
        window = float((behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds", 300))
        stamp = time.monotonic()
        history = [(t, r) for t, r in self._recommendations.get(key, []) if stamp - t <= window]
        history.append((stamp, desired))
        self._recommendations[key] = history
        if desired < current:
            desired = min(current, max(r for _t, r in history))  # the highest recent recommendation wins
        limit = max(current * 2, current + 4)
        reason, message = "DesiredWithinRange", "the desired count is within the acceptable range"
        if desired > limit:
            desired, reason, message = (
                limit,
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            )
        if desired > maximum:
            desired, reason, message = (
                maximum,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            )
        if desired < minimum:
            desired, reason, message = (
                minimum,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )
        status = "False" if reason == "DesiredWithinRange" else "True"
        return desired, set_condition(conditions, "ScalingLimited", status, reason, message)

    async def _write(self, hpa: dict, status: dict) -> None:
        for condition in status.get("conditions") or []:
            condition.pop("lastUpdateTime", None)  # HorizontalPodAutoscalerCondition has no lastUpdateTime
        await write_status(self.api, HPAS, self.hpas, hpa, status)
