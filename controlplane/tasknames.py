"""The name of every Celery task, defined once: the tasks register under these names, beat schedules
and routes refer to them, and apps enqueue by them (`send_task`) without importing `workers/`."""

RECONCILE_SERVICE = "workers.tasks.reconcile.reconcile_service"
RESYNC = "workers.tasks.reconcile.resync"
SYNC_INVENTORIES = "workers.tasks.reconcile.sync_inventories"
PRUNE_HISTORY = "workers.tasks.reconcile.prune_history"
PING = "workers.tasks.system.ping"
TELEMETRY_SCRAPE = "workers.tasks.telemetry.scrape"
TELEMETRY_COMPACT = "workers.tasks.telemetry.compact"
SEND_HEARTBEATS = "workers.tasks.telemetry.send_heartbeats"
HEARTBEAT = "workers.tasks.telemetry.heartbeat"
GATEWAY_USAGE_ROLLUP = "workers.tasks.telemetry.gateway_usage_rollup"

# Queues by task family: `workers.tasks.<family>.*` goes to queue `<prefix><family>`. What-if replays have their own
# queue: a run holds a worker thread for up to its CPU budget (minutes), which must not delay reconciles.
QUEUE_FAMILIES = ("reconcile", "telemetry", "autoscale", "whatif")
QUEUES = ("default", *QUEUE_FAMILIES)  # every queue a worker may consume (the entrypoint's worker takes them all)


def routes(prefix: str = "") -> dict[str, dict[str, str]]:
    """Celery task routes sending each family's tasks to its own (optionally prefixed) queue."""
    return {f"workers.tasks.{family}.*": {"queue": prefix + family} for family in QUEUE_FAMILIES}
AUTOSCALE_EVALUATE_ALL = "workers.tasks.autoscale.evaluate_all"
AUTOSCALE_EVALUATE_SERVICE = "workers.tasks.autoscale.evaluate_service"
AUTOSCALE_PRUNE = "workers.tasks.autoscale.prune"
AUTOSCALE_SURGE_SERVICE = "workers.tasks.autoscale.surge_service"
AUTOSCALE_SLEEP_POOL = "workers.tasks.autoscale.sleep_pool"
ROLLOUT_STEP_ALL = "workers.tasks.rollout.step_all"
WHATIF_RUN = "workers.tasks.whatif.run"
WHATIF_ADVISE = "workers.tasks.whatif.advise"
