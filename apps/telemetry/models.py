"""Stored engine telemetry: a compact time series per service and pool, the latest figures per pod,
and the bookkeeping the control plane's own `/metrics` reads (scrape cycles, queue heartbeats).

The scraper worker (`workers/telemetry.py`) writes these rows; the dashboard, the metrics API and the
autoscaler read them through `apps.telemetry.series`. Raw rows are kept for a day and rolled up into
one-minute rows kept for a month (`apps.telemetry.retention`).
"""

from __future__ import annotations

from django.db import models

from apps.core.access import restricted, staff_only, tenant_owned
from apps.telemetry.choices import Resolution

SERVICE_ROLE = ""  # the role of a row that covers the whole service (every pool merged)
# During a canary rollout, rows that cover one revision's engine pods (every pool merged): the stable workloads'
# and the canary unit's (its pods carry the revision label).
STABLE_ROLE = "stable"
CANARY_ROLE = "canary"


class RealField(models.FloatField):
    """A 4-byte float (PostgreSQL `real`): about seven significant digits, plenty for a figure."""

    def db_type(self, connection):
        return "real"


class SeriesPoint(models.Model):
    """Figures of one service (role "") or one of its pools at one time, raw or rolled up.

    Latency quantiles come from merged bucket increments of the pods, never from averaged percentiles.
    A figure is null when the interval had no data for it.
    """

    # No index of its own: the unique constraint starts with the service (a second one was 247 MB at 24 h x
    # 2,000 services, bench/retention.py, and one more index to update on every insert).
    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="+",
                                db_index=False)
    role = models.CharField(max_length=16, blank=True)
    resolution = models.PositiveSmallIntegerField(choices=Resolution.choices, default=Resolution.RAW)
    time = models.DateTimeField()
    ttft_p50 = RealField(null=True)
    ttft_p95 = RealField(null=True)
    ttft_p99 = RealField(null=True)
    itl_p50 = RealField(null=True)
    itl_p95 = RealField(null=True)
    kv_usage = RealField(null=True)
    running = RealField(null=True)
    waiting = RealField(null=True)
    prefix_hit_rate = RealField(null=True)
    prompt_tps = RealField(null=True)
    gen_tps = RealField(null=True)
    preemptions = RealField(null=True)
    success_rate = RealField(null=True)
    # The KV cache's CPU tier (engine_settings.kv_offload): hit rate, how full it is, tokens loaded back a second.
    cpu_hit_rate = RealField(null=True)
    cpu_usage = RealField(null=True)
    cpu_load_tps = RealField(null=True)
    # Speculative decoding: accepted over drafted tokens (null without it).
    spec_accept_rate = RealField(null=True)
    ready_replicas = models.PositiveSmallIntegerField(default=0)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        # The unique index is also the time-range index: every read is one service, role and resolution.
        # (resolution, time) serves retention's range deletes and the rollup's watermark (Max/Min of a
        # resolution). A BRIN index on time in its place was measured (`bench/retention.py --index brin`)
        # and not taken: this table refills the space retention frees and a refilled BRIN range keeps its
        # old minimum, so each pass reads more of the table with every hour; the watermark lookups become
        # table scans.
        constraints = [
            models.UniqueConstraint(fields=["service", "role", "resolution", "time"], name="telemetry_point_unique")
        ]
        indexes = [models.Index(fields=["resolution", "time"], name="telemetry_point_age_idx")]

    def __str__(self) -> str:
        return f"{self.service_id}/{self.role or 'service'}@{self.time:%H:%M:%S}"


class RequestMixPoint(models.Model):
    """The requests a service's engines finished in one scrape interval and their prompt and output lengths
    (bucket increments of the engines' per-request token histograms, merged over pods), written only for
    intervals that finished a request. The what-if lab rebuilds a service's recorded load from these when the
    gateway metered none of its requests. Kept as long as raw series rows."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="+",
                                db_index=False)  # the unique constraint starts with it
    time = models.DateTimeField()
    interval_s = RealField()
    requests = RealField()
    prompt_buckets = models.JSONField()  # [[upper bound ("+Inf" for the last), cumulative count], ...]
    output_buckets = models.JSONField()

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        constraints = [models.UniqueConstraint(fields=["service", "time"], name="telemetry_requestmix_unique")]
        indexes = [models.Index(fields=["time"], name="telemetry_requestmix_age_idx")]

    def __str__(self) -> str:
        return f"{self.service_id}@{self.time:%H:%M:%S}: {self.requests:g} requests"


class RevisionIncrement(models.Model):
    """One scrape interval of one revision's engines during a canary rollout (role STABLE_ROLE or CANARY_ROLE):
    the TTFT and inter-token histograms' bucket increments and the counts the canary analysis reads, merged over
    the revision's pods. The rollout controller judges a window on their sum when no gateway metered the service's
    requests (apps/telemetry/revisions.py). Kept as long as raw series rows."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="+",
                                db_index=False)  # the unique constraint starts with it
    role = models.CharField(max_length=16)
    time = models.DateTimeField()
    ttft_buckets = models.JSONField()  # [[upper bound ("+Inf" for the last), cumulative count], ...]
    itl_buckets = models.JSONField()
    finished = RealField()  # requests the engines finished, failed ones included
    failed = RealField()  # of them, aborted or failed in the engine
    preemptions = RealField(null=True)  # null: the engine exports no preemption counter
    prompt_tokens = RealField()
    cached_tokens = RealField()  # prompt tokens served from the prefix cache
    # The per-request prompt-length histogram's increments ([] when the engine exports none), paired by rank with
    # TTFT's so the canary analysis can compare TTFT per prompt-length bucket (apps/rollouts/engine_samples.py).
    prompt_buckets = models.JSONField(default=list, blank=True)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        constraints = [models.UniqueConstraint(fields=["service", "role", "time"], name="telemetry_revinc_unique")]
        indexes = [models.Index(fields=["time"], name="telemetry_revinc_age_idx")]

    def __str__(self) -> str:
        return f"{self.service_id}/{self.role}@{self.time:%H:%M:%S}"


class PodStat(models.Model):
    """The latest scrape of one engine pod: its snapshot (for the next increments) and its figures."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="pod_stats",
                                db_index=False)  # the unique constraint starts with it
    pod = models.CharField(max_length=253)
    role = models.CharField(max_length=16)
    node = models.CharField(max_length=253, blank=True)
    snapshot = models.JSONField(null=True, blank=True)
    figures = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    scraped_at = models.DateTimeField()

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["service", "role", "pod"]
        constraints = [models.UniqueConstraint(fields=["service", "pod"], name="telemetry_podstat_unique")]

    def __str__(self) -> str:
        return f"{self.service_id}/{self.pod}"


class ScrapeCycle(models.Model):
    """One scrape cycle of one cluster, with running totals so `/metrics` can export counters."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+",
                                db_index=False)  # the recent-cycles index starts with it
    started_at = models.DateTimeField()
    duration_s = models.FloatField()
    pods = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    lag_p95_s = models.FloatField(null=True)
    message = models.TextField(blank=True)
    total_cycles = models.PositiveBigIntegerField(default=1)
    total_pods = models.PositiveBigIntegerField(default=0)
    total_errors = models.PositiveBigIntegerField(default=0)

    objects = restricted(staff_only("a scrape pass over a whole cluster, platform infrastructure"))

    class Meta:
        indexes = [models.Index(fields=["cluster", "-started_at"], name="telemetry_cycle_recent_idx")]

    def __str__(self) -> str:
        return f"{self.cluster_id}@{self.started_at:%H:%M:%S}"


class QueueHeartbeat(models.Model):
    """The last heartbeat sent through one Celery queue and how long it waited there."""

    queue = models.CharField(max_length=64, primary_key=True)
    sent_at = models.DateTimeField()
    received_at = models.DateTimeField(null=True)
    lag_s = models.FloatField(null=True)

    objects = restricted(staff_only("the workers' record that a queue is being consumed"))

    def __str__(self) -> str:
        return self.queue
