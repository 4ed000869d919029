"""The telemetry scraper: every engine pod's `/metrics` through the API server's pod proxy, per cluster.

One cycle per cluster lists the ready engine pods of our services (one list call), fetches their
expositions in parallel on a bounded thread pool with a per-request timeout (a dead engine costs one
thread one timeout, never the cycle), computes each pod's increments against its previous scrape, merges
them per pool and per service (bucket increments summed, never percentiles averaged), and writes one
series row per service (plus one per pool for multi-pool services), the pods' latest figures, and a
cycle record for the control plane's own `/metrics`. The math is `apps.telemetry.figures`.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from apps.clusters.models import Cluster
from apps.serving.models import InferenceService, Pool
from apps.telemetry.bulkwrite import upsert_pod_stats
from apps.telemetry.exposition import Snapshot
from apps.telemetry.figures import Increments, figures_from_increments, increments, merge_increments, request_mix
from apps.telemetry.models import (
    CANARY_ROLE,
    SERVICE_ROLE,
    STABLE_ROLE,
    PodStat,
    RequestMixPoint,
    RevisionIncrement,
    ScrapeCycle,
    SeriesPoint,
)
from apps.telemetry.promql import PodSelector, PrometheusClient, PrometheusError, query_figures
from apps.telemetry.revisions import increment_fields
from apps.telemetry.series import point_values
from workers.activation import check_cluster as check_activation
from workers.enginepods import EnginePod, PodResult, engine_pods, list_managed_pods, scrape_pod
from workers.kube import kube_for
from workers.kubeerrors import classify
from workers.locks import advisory_lock
from workers.surge import check as check_surges
from workers.upstreams import record_upstreams

log = logging.getLogger(__name__)

# PromQL rates need at least two of Prometheus' own scrapes in the window (15-30 s intervals are usual).
PROMETHEUS_WINDOW_S = 60
LOCK_NAMESPACE = 0x7E1E  # first key of the two-int advisory lock; the second is the cluster id


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


# A cycle leaves no reference cycles behind (a full collection after a 2,000-engine cycle finds none), so
# the collections its allocations trigger only walk live data, the pods' kept snapshots above all: four
# full collections and 0.6-0.8 s of CPU per 2,000-engine cycle (bench/scrape.py). The automatic collector
# is held off while a cycle runs and works as usual between cycles.
_collector_lock = threading.Lock()
_collector_holds = 0
_collector_was_enabled = True


@contextmanager
def collector_held_off():
    """Automatic garbage collection off for the block, then as it was (nested or concurrent blocks count:
    the last one out restores it)."""
    global _collector_holds, _collector_was_enabled
    with _collector_lock:
        if _collector_holds == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_holds += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_holds -= 1
            if _collector_holds == 0 and _collector_was_enabled:
                gc.enable()


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
    merged = _merged(items)
    return None if merged is None else figures_from_increments(merged)


def _merged(items: list[Increments]) -> Increments | None:
    items = [item for item in items if item is not None]
    engines = {item.engine for item in items}
    if not items or len(engines) > 1:
        return None
    return merge_increments(items)


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
    mixes: dict[int, object] = field(default_factory=dict)  # service id -> RequestMix of the interval
    revisions: dict[tuple[int, str], object] = field(default_factory=dict)  # (service, side) -> merged Increments


def collect_pod_results(results: list[PodResult], service_ids, multi_pool, at) -> CycleFigures:
    """Increments of each fetched pod against its previous scrape, merged per pool and per service."""
    out = CycleFigures()
    previous = previous_snapshots(service_ids, [r.pod.name for r in results])
    per_pool: dict[tuple[int, str], list] = defaultdict(list)
    per_side: dict[tuple[int, str], list] = defaultdict(list)
    canary = {r.pod.service_id for r in results if r.pod.revision}
    for result in results:
        pod = result.pod
        if result.snapshot is None:
            out.errors += 1
            out.failed.append(PodStat(service_id=pod.service_id, pod=pod.name, role=pod.role, node=pod.node,
                                      error=result.error[:2000], scraped_at=at))
            continue
        inc = pod_increments(previous.get((pod.service_id, pod.name)), result.snapshot)
        per_pool[(pod.service_id, pod.role)].append(inc)
        if pod.service_id in canary:
            per_side[(pod.service_id, pod.side)].append(inc)
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
        merged = _merged([i for r in roles for i in per_pool[(service_id, r)]])
        out.groups[(service_id, SERVICE_ROLE)] = None if merged is None else figures_from_increments(merged)
        mix = None if merged is None else request_mix(merged)
        if mix is not None:
            out.mixes[service_id] = mix
        if service_id in multi_pool:
            for role in roles:
                out.groups[(service_id, role)] = merged_figures(per_pool[(service_id, role)])
    for key, items in per_side.items():
        merged = _merged(items)
        out.groups[key] = None if merged is None else figures_from_increments(merged)
        if merged is not None:
            out.revisions[key] = merged
    return out


def query_service(client: PrometheusClient, engine: str, pods: list[EnginePod], multi_pool: bool):
    """The figures of one service (and its pools) and of each of its pods over the last PROMETHEUS_WINDOW_S,
    from the cluster's Prometheus: (groups, per pod, error, when answered)."""
    service_id, namespace, names = pods[0].service_id, pods[0].namespace, [p.name for p in pods]
    groups = {(service_id, SERVICE_ROLE): names}
    if multi_pool:
        for role in {p.role for p in pods}:
            groups[(service_id, role)] = [p.name for p in pods if p.role == role]
    if any(p.revision for p in pods):
        for side in (STABLE_ROLE, CANARY_ROLE):
            groups[(service_id, side)] = [p.name for p in pods if p.side == side]
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
        with collector_held_off():
            report = _scrape_cluster(cluster, at)
        check_activation(cluster, kube_for(cluster).core, float(settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS))
        return report


@dataclass
class ReadyPods:
    """The cycle's view of the engine pods: ready counts per (service, pool) and, during a canary rollout, per
    (service, revision side); the ready pods with a port to read, per service; each service's ready pools."""

    ready_count: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    side_ready: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    pods_of: dict[int, list[EnginePod]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, pods: list[EnginePod]) -> ReadyPods:
        ready = cls()
        canary = {pod.service_id for pod in pods if pod.revision}
        for pod in pods:
            if not pod.ready:
                continue
            ready.ready_count[(pod.service_id, pod.role)] += 1
            if pod.service_id in canary:
                ready.side_ready[(pod.service_id, pod.side)] += 1
            if pod.port:
                ready.pods_of[pod.service_id].append(pod)
        return ready


def _scrape_cluster(cluster: Cluster, at: datetime | None = None) -> CycleReport:
    """Read every ready engine pod of the cluster's services once (pod proxy, or the cluster's Prometheus
    when it has one) and write the rows."""
    started = time.monotonic()
    at = at or timezone.now()
    report = CycleReport(cluster.name)
    rows = InferenceService.objects.filter(cluster=cluster).values_list("pk", "uid", "runtime__engine")
    services = {str(uid): pk for pk, uid, _ in rows}
    engines = {pk: engine for pk, _, engine in rows}
    if not services:
        return report
    timeout = float(settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS)
    core = kube_for(cluster).core
    try:
        items = list_managed_pods(core, timeout)
    except Exception as exc:  # an unreachable cluster is a failed cycle, not a crash
        report.errors, report.message = 1, classify(exc).message
    else:
        pods = engine_pods(items, services)
        record_upstreams(items, services, at)
        service_ids = list(services.values())
        report.rows = _read_and_write(cluster, core, engines, pods, service_ids, at, report, started + (
            settings.TELEMETRY_CYCLE_DEADLINE_SECONDS))
        _forget_gone_pods(pods, service_ids)
    report.duration_s = time.monotonic() - started
    _record_cycle(cluster, at, report)
    return report


def _read_and_write(cluster: Cluster, core, engines: dict[int, str], pods: list[EnginePod], service_ids: list[int],
                    at: datetime, report: CycleReport, cycle_deadline: float) -> int:
    """Fetch the ready pods' figures and write them, chunk by chunk; returns the series rows written.

    Every fetch is submitted to the thread pool up front; results are written in chunks of services as
    they arrive, so a row lands a fraction of a cycle after its pods were read, not after the last pod.
    """
    timeout = float(settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS)
    multi_pool = set(
        Pool.objects.filter(service_id__in=service_ids).values("service_id")
        .annotate(n=Count("id")).filter(n__gt=1).values_list("service_id", flat=True)
    )
    ready = ReadyPods.of(pods)
    pods_of = ready.pods_of
    roles_of = ready_roles(ready.ready_count)
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
        written += write_chunk(chunk, found, ready.ready_count, roles_of, multi_pool, at, ready.side_ready)
        check_surges(found.groups)
        report.pods += sum(len(pods_of[sid]) for sid in pending)
        report.errors += found.errors
        now = time.time()
        report.lags_s.extend(now - fetched for fetched in found.fetched_at)
        pending = ahead
    return written


def _forget_gone_pods(pods: list[EnginePod], service_ids: list[int]) -> None:
    """Drop the latest figures and the previous scrape of pods the cluster no longer lists."""
    PodStat.objects.filter(service_id__in=service_ids).exclude(pod__in=[p.name for p in pods]).delete()
    live, known = {(p.service_id, p.name) for p in pods}, set(service_ids)
    for key in [k for k in _recent if k[0] in known and k not in live]:
        _recent.pop(key, None)


def ready_roles(ready_count: dict[tuple[int, str], int]) -> dict[int, list[str]]:
    """Each service's pools with a ready pod, sorted."""
    roles: dict[int, list[str]] = defaultdict(list)
    for service_id, role in sorted(ready_count):
        roles[service_id].append(role)
    return roles


def write_chunk(service_ids: list[int], found: CycleFigures, ready_count, roles_of, multi_pool, at,
                side_ready=None) -> int:
    """One transaction: the services' series rows and their pods' latest state; returns the rows written.
    `roles_of` is `ready_roles(ready_count)`, computed once a cycle; during a canary rollout each revision's
    figures are rows of their own (STABLE_ROLE, CANARY_ROLE), with `side_ready` pods ready."""
    points = []
    for service_id in service_ids:
        roles = roles_of.get(service_id, [])
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
        points.extend(
            SeriesPoint(service_id=service_id, role=side, time=at, ready_replicas=(side_ready or {}).get(
                (service_id, side), 0), **point_values(found.groups.get((service_id, side))))
            for side in (STABLE_ROLE, CANARY_ROLE) if (service_id, side) in found.groups
        )
    mixes = [RequestMixPoint(service_id=service_id, time=at, interval_s=mix.interval_s, requests=mix.requests,
                             prompt_buckets=_buckets(mix.prompt_buckets), output_buckets=_buckets(mix.output_buckets))
             for service_id, mix in found.mixes.items()]
    revisions = [RevisionIncrement(service_id=service_id, role=side, time=at, **increment_fields(inc))
                 for (service_id, side), inc in found.revisions.items()]
    with transaction.atomic():
        SeriesPoint.objects.bulk_create(points, ignore_conflicts=True)
        RequestMixPoint.objects.bulk_create(mixes, ignore_conflicts=True)
        RevisionIncrement.objects.bulk_create(revisions, ignore_conflicts=True)
        upsert_pod_stats(found.stats, ("role", "node", "snapshot", "figures", "error", "scraped_at"))
        upsert_pod_stats(found.failed, ("role", "node", "error"))
    return len(points)


def _buckets(buckets) -> list:
    return [["+Inf" if bound == float("inf") else bound, count] for bound, count in sorted(buckets.items())]


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
