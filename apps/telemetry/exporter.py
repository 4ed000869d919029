"""The control plane's own metrics for Prometheus, computed from the database at scrape time.

Web, worker and beat are separate processes, so no in-process counter sees everything. Every figure
here is read from rows the workers write anyway: reconcile passes (`serving.ReconcileRun`), scrape
cycles with running totals (`telemetry.ScrapeCycle`) and queue heartbeats (`telemetry.QueueHeartbeat`).
"""

from __future__ import annotations

from django.db.models import Count, F, Max, OuterRef, Q, Subquery, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from apps.serving.models import InferenceService, ReconcileRun
from apps.telemetry.models import QueueHeartbeat, ScrapeCycle

RECONCILE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def reconcile_metrics():
    """Outcomes and durations of the recorded reconcile passes (passes that changed something or
    failed; a no-op resync records nothing)."""
    runs = CounterMetricFamily("controlplane_reconcile_runs", "Recorded reconcile passes by result.",
                               labels=["result"])
    for result, n in ReconcileRun.objects.values_list("result").annotate(n=Count("id")).order_by("result"):
        runs.add_metric([result], n)
    bounds = {f"le_{i}": Count("id", filter=Q(duration_ms__lte=b * 1000)) for i, b in enumerate(RECONCILE_BUCKETS_S)}
    totals = ReconcileRun.objects.aggregate(n=Count("id"), total_ms=Sum("duration_ms"), **bounds)
    buckets = [(floatToGoString(b), totals[f"le_{i}"]) for i, b in enumerate(RECONCILE_BUCKETS_S)]
    buckets.append(("+Inf", totals["n"]))
    duration = HistogramMetricFamily("controlplane_reconcile_duration_seconds",
                                     "Duration of recorded reconcile passes.")
    duration.add_metric([], buckets, sum_value=(totals["total_ms"] or 0) / 1000)
    return [runs, duration]


def service_metrics():
    phases = GaugeMetricFamily("controlplane_services", "Services by phase.", labels=["phase"])
    for phase, n in InferenceService.objects.values_list("phase").annotate(n=Count("id")).order_by("phase"):
        phases.add_metric([phase], n)
    behind = InferenceService.objects.filter(observed_generation__lt=F("generation")).count()
    pending = GaugeMetricFamily("controlplane_services_behind_spec",
                                "Services whose last observed generation is older than their spec.", value=behind)
    return [phases, pending]


def queue_metrics():
    """Lag of the last heartbeat through each queue; a heartbeat still waiting counts its age so far."""
    now = timezone.now()
    lag = GaugeMetricFamily("controlplane_task_queue_lag_seconds",
                            "How long the last heartbeat task waited in the queue.", labels=["queue"])
    for beat in QueueHeartbeat.objects.order_by("queue"):
        value = beat.lag_s if beat.received_at is not None else (now - beat.sent_at).total_seconds()
        lag.add_metric([beat.queue], max(value or 0.0, 0.0))
    return [lag]


def scrape_metrics():
    newest = ScrapeCycle.objects.filter(cluster_id=OuterRef("cluster_id")).order_by("-started_at").values("pk")[:1]
    latest = ScrapeCycle.objects.filter(pk=Subquery(newest)).select_related("cluster").order_by("cluster__name")
    families = {
        "cycles": CounterMetricFamily("controlplane_telemetry_scrape_cycles", "Scrape cycles run.", labels=["cluster"]),
        "pods": CounterMetricFamily("controlplane_telemetry_pod_scrapes", "Engine pods scraped.", labels=["cluster"]),
        "errors": CounterMetricFamily("controlplane_telemetry_scrape_errors",
                                      "Failed pod scrapes (and failed pod listings).", labels=["cluster"]),
        "duration": GaugeMetricFamily("controlplane_telemetry_scrape_duration_seconds",
                                      "Duration of the last scrape cycle.", labels=["cluster"]),
        "lag": GaugeMetricFamily("controlplane_telemetry_scrape_lag_p95_seconds",
                                 "95th percentile of scrape-to-row lag in the last cycle.", labels=["cluster"]),
        "last": GaugeMetricFamily("controlplane_telemetry_last_scrape_timestamp_seconds",
                                  "Start of the last scrape cycle (Unix time).", labels=["cluster"]),
    }
    for cycle in latest:
        name = [cycle.cluster.name]
        families["cycles"].add_metric(name, cycle.total_cycles)
        families["pods"].add_metric(name, cycle.total_pods)
        families["errors"].add_metric(name, cycle.total_errors)
        families["duration"].add_metric(name, cycle.duration_s)
        if cycle.lag_p95_s is not None:
            families["lag"].add_metric(name, cycle.lag_p95_s)
        families["last"].add_metric(name, cycle.started_at.timestamp())
    recent = ScrapeCycle.objects.aggregate(longest=Max("duration_s"))
    longest = GaugeMetricFamily("controlplane_telemetry_scrape_duration_max_seconds",
                                "Longest retained scrape cycle.", value=recent["longest"] or 0.0)
    return [*families.values(), longest]


class DatabaseCollector:
    """A prometheus_client collector that reads every figure from the database when scraped."""

    def collect(self):
        yield from reconcile_metrics()
        yield from service_metrics()
        yield from queue_metrics()
        yield from scrape_metrics()


def exposition() -> bytes:
    """The text exposition of the control plane's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return generate_latest(registry)
