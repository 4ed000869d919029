"""The gateway's `/metrics` families of the door's queue and of metering, kept apart from the request path's
module (gateway/app.py) that updates them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


def queue_families(registry: CollectorRegistry, door) -> tuple[Gauge, Histogram, Counter]:
    """(waiting by service, band and tenant; seconds waited; requests shed by reason)."""
    waiting = Gauge("gateway_queue_waiting", "Requests waiting at the door for a saturated service, "
                    "by service, band and tenant.", ["service", "band", "tenant"], registry=registry)
    seconds = Histogram(
        "gateway_queue_seconds", "Time a request let through waited at the door.", registry=registry,
        buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0))
    shed = Counter("gateway_queue_shed", "Requests answered 429 by the door's queue, by reason "
                   "(queue_full, queue_timeout).", ["reason"], registry=registry)
    Gauge("gateway_queue_saturated_services", "Services at this replica's share of their bound.",
          registry=registry).set_function(
        lambda: sum(1 for s in door.services.values() if s.bound is not None and s.outstanding >= s.bound))
    Gauge("gateway_order_round_trips", "Redis round trips of the shared order's own since start: looks at a band "
          "for a head, and pipelines that carried only requests let go (only grows).", registry=registry,
          ).set_function(lambda: door.order.trips if door.order is not None else 0)
    decisions = Gauge("gateway_order_decisions", "Heads the shared order looked at before they went, held back for "
                      "another replica's flow, or let go after the longest hold, since start (only grow).",
                      ["decision"], registry=registry)
    for decision in door.held:
        decisions.labels(decision).set_function(lambda decision=decision: door.held[decision])
    return waiting, seconds, shed


def usage_gauges(registry: CollectorRegistry, usage) -> None:
    for name, text, value in (
            ("gateway_usage_database_up", "1 while usage rows reach PostgreSQL, 0 while they wait (the database "
             "unreachable, or failing the oldest rows).", lambda: 1 if usage.up else 0),
            ("gateway_usage_waiting_rows", "Usage rows not written yet: queued in memory or spooled on disk.",
             lambda: usage.waiting),
            ("gateway_usage_spool_bytes", "Bytes of the usage spool on disk.",
             lambda: usage.spool.bytes if usage.spool else 0),
            ("gateway_usage_dropped_rows", "Usage rows lost since start because the queue or the spool was "
             "full (only grows).", lambda: usage.dropped),
            ("gateway_usage_written_rows", "Usage rows written since start (only grows).", lambda: usage.written),
            ("gateway_usage_quarantined_rows", "Usage rows the database refused, set aside in the dead-letter "
             "file since start (only grows).", lambda: usage.quarantined),
            ("gateway_usage_unprepared_rows", "Usage rows written without their prompt's columns since start: "
             "the prompt could not be hashed (only grows).", lambda: usage.unprepared),
            ("gateway_usage_stuck", "1 while the oldest usage rows keep failing with the database answering, "
             "for a reason no row is to blame for (a missing table or grant).", lambda: 1 if usage.stuck else 0)):
        Gauge(name, text, registry=registry).set_function(value)
