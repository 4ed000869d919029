"""The telemetry scraper: every engine pod's `/metrics` through the API server's pod proxy, per cluster.

One cycle per cluster lists the ready engine pods of our services (one list call), fetches their
expositions in parallel on a bounded thread pool with a per-request timeout (a dead engine costs one
thread one timeout, never the cycle), computes each pod's increments against its previous scrape, merges
them per pool and per service (bucket increments summed, never percentiles averaged), and writes one
series row per service (plus one per pool for multi-pool services), the pods' latest figures, and a
cycle record for the control plane's own `/metrics`. The math is `apps.telemetry.figures`.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from kubernetes import client as k8s

from apps.clusters.models import Cluster
from apps.serving.models import InferenceService, Pool
from apps.serving.names import (
    COMPONENT_LABEL,
    ENGINE_COMPONENTS,
    LWS_WORKER_INDEX_LABEL,
    MANAGED_SELECTOR,
    SERVICE_UID_LABEL,
    pod_role,
)
from apps.telemetry.bulkwrite import upsert_pod_stats
from apps.telemetry.exposition import NotAnEngineExposition, Snapshot, parse_snapshot
from apps.telemetry.figures import Increments, figures_from_increments, increments, merge_increments
from apps.telemetry.models import SERVICE_ROLE, PodStat, ScrapeCycle, SeriesPoint
from apps.telemetry.promql import PodSelector, PrometheusClient, PrometheusError, query_figures
from apps.telemetry.scrape import ACCEPT
from apps.telemetry.series import point_values
from workers.activation import check_cluster as check_activation
from workers.kube import classify, kube_for
from workers.locks import advisory_lock

log = logging.getLogger(__name__)

# PromQL rates need at least two of Prometheus' own scrapes in the window (15-30 s intervals are usual).
PROMETHEUS_WINDOW_S = 60
LOCK_NAMESPACE = 0x7E1E  # first key of the two-int advisory lock; the second is the cluster id


@dataclass(frozen=True)
class EnginePod:
    """An engine pod worth scraping: whose it is, where its HTTP port is, and whether it is ready."""

    service_id: int
    namespace: str
    name: str
    role: str
    node: str
    port: int | None
    ready: bool


@dataclass
class PodResult:
    """One pod's fetch: its parsed snapshot and when it arrived, or why it failed."""

    pod: EnginePod
    snapshot: Snapshot | None = None
    error: str = ""
    fetched_at: float = 0.0


@dataclass
class CycleReport:
    """What one cluster's cycle did."""

    cluster: str
    pods: int = 0
    errors: int = 0
    rows: int = 0
    duration_s: float = 0.0
    lags_s: list[float] = field(default_factory=list)
    message: str = ""
    skipped: bool = False

    @property
    def lag_p95_s(self) -> float | None:
        if not self.lags_s:
            return None
        ordered = sorted(self.lags_s)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


# --- Clients --------------------------------------------------------------------------------------------

_executor: ThreadPoolExecutor | None = None


def executor() -> ThreadPoolExecutor:
    """The process's scrape thread pool, created on first use (after a prefork worker has forked)."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(settings.TELEMETRY_SCRAPE_CONCURRENCY, thread_name_prefix="scrape")
    return _executor


# --- Pods -----------------------------------------------------------------------------------------------


def _http_port(pod: dict) -> int | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    engine = next((c for c in containers if c.get("name") == "engine"), containers[0] if containers else None)
    ports = (engine or {}).get("ports") or []
    named = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    return named.get("containerPort") if named else None


def _is_ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return status.get("phase") == "Running" and ready and not (pod.get("metadata") or {}).get("deletionTimestamp")


def engine_pods(pods: list[dict], service_ids: dict[str, int]) -> list[EnginePod]:
    """The engine pods (engine, prefill, decode; LeaderWorkerSet leaders only) of known services."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        service_id = service_ids.get(labels.get(SERVICE_UID_LABEL, ""))
        if service_id is None or labels.get(COMPONENT_LABEL) not in ENGINE_COMPONENTS:
            continue
        if labels.get(LWS_WORKER_INDEX_LABEL, "0") != "0":
            continue  # LeaderWorkerSet workers hold shards; the leader serves the API and the metrics
        role = pod_role(labels)
        out.append(EnginePod(
            service_id=service_id, namespace=meta.get("namespace", ""), name=meta.get("name", ""), role=role,
            node=(pod.get("spec") or {}).get("nodeName") or "", port=_http_port(pod), ready=_is_ready(pod),
        ))
    return out


def list_engine_pods(core: k8s.CoreV1Api, service_ids: dict[str, int], timeout: float) -> list[EnginePod]:
    """One list call per cluster: every pod we manage, read as plain JSON."""
    response = core.list_pod_for_all_namespaces(
        label_selector=MANAGED_SELECTOR, _preload_content=False, _request_timeout=(timeout, timeout * 2)
    )
    return engine_pods(json.loads(response.data).get("items") or [], service_ids)


class FetchTooBig(Exception):
    """The exposition outgrew TELEMETRY_MAX_EXPOSITION_BYTES."""


class FetchTooSlow(Exception):
    """The exposition did not arrive whole within its time."""


def read_bounded(response, max_bytes: int, deadline: float) -> bytes:
    """The body, read one socket read at a time, refused past `max_bytes` or the monotonic `deadline`. Each
    read is bounded by the read timeout; this bounds their sum (an engine dripping bytes never ends)."""
    parts, size = [], 0
    while True:
        chunk = response.read1(64 * 1024)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > max_bytes:
            raise FetchTooBig(f"exposition larger than {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise FetchTooSlow(
                f"exposition not complete in time (TELEMETRY_SCRAPE_TIMEOUT_SECONDS="
                f"{settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS} seconds a pod, TELEMETRY_CYCLE_DEADLINE_SECONDS="
                f"{settings.TELEMETRY_CYCLE_DEADLINE_SECONDS} a cycle)")
        parts.append(chunk)


def scrape_pod(core: k8s.CoreV1Api, pod: EnginePod, timeout: float, deadline: float | None = None) -> PodResult:
    """GET the pod's /metrics through the API server's pod proxy and parse it; errors end up in the result.

    The fetch is bounded in time (`timeout`, and the cycle's monotonic `deadline`) and in bytes
    (TELEMETRY_MAX_EXPOSITION_BYTES), so one slow or huge engine costs its own pod, not the cluster's cycle.
    """
    result = PodResult(pod)
    own_deadline = time.monotonic() + timeout
    deadline = own_deadline if deadline is None else min(own_deadline, deadline)
    try:
        if time.monotonic() > deadline:
            raise FetchTooSlow(f"not fetched: the cycle ran past its {settings.TELEMETRY_CYCLE_DEADLINE_SECONDS} "
                               "seconds")
        response = core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod.name}:{pod.port}", pod.namespace, "metrics",
            _preload_content=False, _request_timeout=(timeout, timeout), _headers={"Accept": ACCEPT},
        )
        try:
            body = read_bounded(response, settings.TELEMETRY_MAX_EXPOSITION_BYTES, deadline)
        finally:
            response.release_conn()
        text = body.decode("utf-8", errors="replace")
        result.fetched_at = time.time()
        result.snapshot = parse_snapshot(text, scraped_at=result.fetched_at)
    except NotAnEngineExposition as exc:
        result.error = f"not an engine exposition: {exc}"
    except FetchTooBig as exc:
        result.error = str(exc)
    except FetchTooSlow as exc:
        result.error = str(exc)
    except Exception as exc:  # any failure of one pod is that pod's error, never the cycle's
        result.error = classify(exc).message
    return result


# --- Increments -----------------------------------------------------------------------------------------

# Each worker process keeps the snapshots it parsed; the database copy is read only on a miss (another
# process scraped the pod last, or this one just started), which keeps JSON decoding off the hot path.
_recent: dict[tuple[int, str], Snapshot] = {}


def previous_snapshots(service_ids, names) -> dict[tuple[int, str], Snapshot]:
    """Each pod's previous snapshot: from this process's memory when it matches the stored scrape time,
    else decoded from `PodStat.snapshot`."""
    stored = PodStat.objects.filter(service_id__in=service_ids, pod__in=names).values_list(
        "service_id", "pod", "scraped_at")
    out, missing = {}, []
    for service_id, pod, scraped_at in stored:
        cached = _recent.get((service_id, pod))
        if cached is not None and abs(cached.scraped_at - scraped_at.timestamp()) < 1e-3:
            out[(service_id, pod)] = cached
        else:
            missing.append(pod)
    if missing:
        for service_id, pod, data in PodStat.objects.filter(
            service_id__in=service_ids, pod__in=missing, snapshot__isnull=False
        ).values_list("service_id", "pod", "snapshot"):
            out[(service_id, pod)] = Snapshot.from_dict(data)
    return out


def pod_increments(previous: Snapshot | None, current: Snapshot) -> Increments | None:
    """The pod's increments since its previous scrape, or None on its first scrape (or an engine swap)."""
    if previous is None or previous.engine != current.engine or current.scraped_at <= previous.scraped_at:
        return None
    return increments(previous, current)


def merged_figures(items: list[Increments]):
    """Figures of pods merged (bucket increments summed); None when no pod has an interval yet."""
    items = [item for item in items if item is not None]
    engines = {item.engine for item in items}
    if not items or len(engines) > 1:
        return None
    return figures_from_increments(merge_increments(items))


# --- One cycle ------------------------------------------------------------------------------------------


@dataclass
class CycleFigures:
    """What a source produced for some services: figures per (service, role) group ("" = the whole
    service) and the pods' latest state to store."""

    groups: dict[tuple[int, str], object] = field(default_factory=dict)
    stats: list[PodStat] = field(default_factory=list)
    failed: list[PodStat] = field(default_factory=list)
    fetched_at: list[float] = field(default_factory=list)
    errors: int = 0


def collect_pod_results(results: list[PodResult], service_ids, multi_pool, at) -> CycleFigures:
    """Increments of each fetched pod against its previous scrape, merged per pool and per service."""
    out = CycleFigures()
    previous = previous_snapshots(service_ids, [r.pod.name for r in results])
    per_pool: dict[tuple[int, str], list] = defaultdict(list)
    for result in results:
        pod = result.pod
        if result.snapshot is None:
            out.errors += 1
            out.failed.append(PodStat(service_id=pod.service_id, pod=pod.name, role=pod.role, node=pod.node,
                                      error=result.error[:2000], scraped_at=at))
            continue
        inc = pod_increments(previous.get((pod.service_id, pod.name)), result.snapshot)
        per_pool[(pod.service_id, pod.role)].append(inc)
        figures = figures_from_increments(inc) if inc is not None else None
        out.stats.append(PodStat(
            service_id=pod.service_id, pod=pod.name, role=pod.role, node=pod.node,
            snapshot=result.snapshot.to_dict(), figures=figures.as_dict() if figures else None, error="",
            scraped_at=datetime.fromtimestamp(result.fetched_at, UTC),
        ))
        out.fetched_at.append(result.fetched_at)
        _recent[(pod.service_id, pod.name)] = result.snapshot
    for service_id in {sid for sid, _ in per_pool}:
        roles = sorted(role for sid, role in per_pool if sid == service_id)
        out.groups[(service_id, SERVICE_ROLE)] = merged_figures([i for r in roles for i in per_pool[(service_id, r)]])
        if service_id in multi_pool:
            for role in roles:
                out.groups[(service_id, role)] = merged_figures(per_pool[(service_id, role)])
    return out


def query_service(client: PrometheusClient, engine: str, pods: list[EnginePod], multi_pool: bool):
    """The figures of one service (and its pools) and of each of its pods over the last PROMETHEUS_WINDOW_S,
    from the cluster's Prometheus: (groups, per pod, error, when answered)."""
    service_id, namespace, names = pods[0].service_id, pods[0].namespace, [p.name for p in pods]
    groups = {(service_id, SERVICE_ROLE): names}
    if multi_pool:
        for role in {p.role for p in pods}:
            groups[(service_id, role)] = [p.name for p in pods if p.role == role]
    try:
        figures = {key: query_figures(client, engine, PodSelector(namespace, pods=selected), PROMETHEUS_WINDOW_S)
                   .get(()) for key, selected in groups.items()}
        per_pod = query_figures(client, engine, PodSelector(namespace, pods=names), PROMETHEUS_WINDOW_S, by=("pod",))
        return figures, per_pod, "", time.time()
    except PrometheusError as exc:
        return {}, {}, str(exc), time.time()


def collect_prometheus(answers: list[tuple[list[EnginePod], tuple]], at) -> CycleFigures:
    """Prometheus' answers per service as groups and pod states; a failed query fails its pods."""
    out = CycleFigures()
    for pods, (figures, per_pod, error, answered_at) in answers:
        out.groups.update(figures)
        for pod in pods:
            stat = PodStat(service_id=pod.service_id, pod=pod.name, role=pod.role, node=pod.node,
                           error=error[:2000], scraped_at=at)
            if error:
                out.errors += 1
                out.failed.append(stat)
                continue
            pod_figures = per_pod.get((pod.name,))
            stat.figures = pod_figures.as_dict() if pod_figures else None
            out.stats.append(stat)
            out.fetched_at.append(answered_at)
    return out


def chunks(service_ids: list[int], pods_of: dict[int, list], size: int) -> list[list[int]]:
    """Services in groups of about `size` ready pods (a service is never split)."""
    out, current, count = [], [], 0
    for service_id in service_ids:
        current.append(service_id)
        count += len(pods_of.get(service_id, ()))
        if count >= size:
            out.append(current)
            current, count = [], 0
    if current:
        out.append(current)
    return out


def scrape_cluster(cluster: Cluster, at: datetime | None = None) -> CycleReport:
    """One cycle for the cluster, unless another worker's cycle for it is still running (then nothing is
    read or written: two cycles at once would compute the same increments twice)."""
    with advisory_lock(LOCK_NAMESPACE, cluster.pk) as held:
        if not held:
            return CycleReport(cluster.name, skipped=True)
        report = _scrape_cluster(cluster, at)
        check_activation(cluster, kube_for(cluster).core, float(settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS))
        return report


def _scrape_cluster(cluster: Cluster, at: datetime | None = None) -> CycleReport:
    """Read every ready engine pod of the cluster's services once (pod proxy, or the cluster's Prometheus
    when it has one) and write the rows.

    Every fetch is submitted to the thread pool up front; results are written in chunks of services as
    they arrive, so a row lands a fraction of a cycle after its pods were read, not after the last pod.
    """
    started = time.monotonic()
    at = at or timezone.now()
    report = CycleReport(cluster.name)
    rows = InferenceService.objects.filter(cluster=cluster).values_list("pk", "uid", "runtime__engine")
    services = {str(uid): pk for pk, uid, _ in rows}
    engines = {pk: engine for pk, _, engine in rows}
    if not services:
        return report
    timeout = float(settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS)
    cycle_deadline = started + settings.TELEMETRY_CYCLE_DEADLINE_SECONDS
    core = kube_for(cluster).core
    try:
        pods = list_engine_pods(core, services, timeout)
    except Exception as exc:  # an unreachable cluster is a failed cycle, not a crash
        report.errors, report.message = 1, classify(exc).message
        report.duration_s = time.monotonic() - started
        _record_cycle(cluster, at, report)
        return report

    service_ids = list(services.values())
    multi_pool = set(
        Pool.objects.filter(service_id__in=service_ids).values("service_id")
        .annotate(n=Count("id")).filter(n__gt=1).values_list("service_id", flat=True)
    )
    ready_count: dict[tuple[int, str], int] = defaultdict(int)
    pods_of: dict[int, list[EnginePod]] = defaultdict(list)
    for pod in pods:
        if pod.ready:
            ready_count[(pod.service_id, pod.role)] += 1
            if pod.port:
                pods_of[pod.service_id].append(pod)
    pool = executor()
    client = PrometheusClient(cluster.prometheus_url, timeout=timeout) if cluster.prometheus_url else None

    def submit(chunk: list[int]) -> dict:
        if client is not None:
            return {sid: pool.submit(query_service, client, engines[sid], pods_of[sid], sid in multi_pool)
                    for sid in chunk if sid in pods_of}
        return {sid: [pool.submit(scrape_pod, core, p, timeout, cycle_deadline) for p in pods_of[sid]]
                for sid in chunk if sid in pods_of}

    # One chunk in flight ahead of the one being written: the pool stays busy, and the writing thread is
    # not starved of the GIL by hundreds of queued parses.
    plan = chunks(service_ids, pods_of, max(2 * settings.TELEMETRY_SCRAPE_CONCURRENCY, 1))
    pending = submit(plan[0]) if plan else {}
    written = 0
    for index, chunk in enumerate(plan):
        ahead = submit(plan[index + 1]) if index + 1 < len(plan) else {}
        if client is not None:
            found = collect_prometheus([(pods_of[sid], future.result()) for sid, future in pending.items()], at)
        else:
            results = [future.result() for futures in pending.values() for future in futures]
            found = collect_pod_results(results, chunk, multi_pool, at)
        written += write_chunk(chunk, found, ready_count, multi_pool, at)
        report.pods += sum(len(pods_of[sid]) for sid in pending)
        report.errors += found.errors
        now = time.time()
        report.lags_s.extend(now - fetched for fetched in found.fetched_at)
        pending = ahead

    PodStat.objects.filter(service_id__in=service_ids).exclude(pod__in=[p.name for p in pods]).delete()
    live, known = {(p.service_id, p.name) for p in pods}, set(service_ids)
    for key in [k for k in _recent if k[0] in known and k not in live]:
        _recent.pop(key, None)
    report.rows = written
    report.duration_s = time.monotonic() - started
    _record_cycle(cluster, at, report)
    return report


def write_chunk(service_ids: list[int], found: CycleFigures, ready_count, multi_pool, at) -> int:
    """One transaction: the services' series rows and their pods' latest state; returns the rows written."""
    points = []
    for service_id in service_ids:
        roles = sorted(role for sid, role in ready_count if sid == service_id)
        points.append(SeriesPoint(
            service_id=service_id, role=SERVICE_ROLE, time=at,
            ready_replicas=sum(ready_count[(service_id, role)] for role in roles),
            **point_values(found.groups.get((service_id, SERVICE_ROLE))),
        ))
        if service_id in multi_pool:
            points.extend(
                SeriesPoint(service_id=service_id, role=role, time=at, ready_replicas=ready_count[(service_id, role)],
                            **point_values(found.groups.get((service_id, role))))
                for role in roles
            )
    with transaction.atomic():
        SeriesPoint.objects.bulk_create(points, ignore_conflicts=True)
        upsert_pod_stats(found.stats, ("role", "node", "snapshot", "figures", "error", "scraped_at"))
        upsert_pod_stats(found.failed, ("role", "node", "error"))
    return len(points)


def _record_cycle(cluster: Cluster, at: datetime, report: CycleReport) -> None:
    """A cycle row whose running totals continue the cluster's previous one (the /metrics counters)."""
    last = ScrapeCycle.objects.filter(cluster=cluster).order_by("-started_at").values(
        "total_cycles", "total_pods", "total_errors").first() or {"total_cycles": 0, "total_pods": 0, "total_errors": 0}
    ScrapeCycle.objects.create(
        cluster=cluster, started_at=at, duration_s=report.duration_s, pods=report.pods, errors=report.errors,
        lag_p95_s=report.lag_p95_s, message=report.message[:2000], total_cycles=last["total_cycles"] + 1,
        total_pods=last["total_pods"] + report.pods, total_errors=last["total_errors"] + report.errors,
    )


def scrape_all() -> list[CycleReport]:
    """One cycle for every cluster (clusters in turn; the pods of each in parallel)."""
    at = timezone.now()
    reports = []
    for cluster in Cluster.objects.all():
        try:
            report = scrape_cluster(cluster, at=at)
        except Exception as exc:  # one bad cluster never stops the cycle of the others
            log.exception("telemetry: cluster %s: cycle failed", cluster.name)
            report = CycleReport(cluster.name, errors=1, message=f"{exc.__class__.__name__}: {exc}")
        if report.skipped:
            log.info("telemetry: cluster %s: another worker's cycle is still running", cluster.name)
        elif report.message:
            log.warning("telemetry: cluster %s: %s", cluster.name, report.message)
        reports.append(report)
    return reports
