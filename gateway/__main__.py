"""`python -m gateway`: serve the gateway with uvicorn."""

from __future__ import annotations

import argparse
import os

from gateway.prefix import KEY_SECRETS, hash_key


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gateway", description="The tenants' OpenAI-compatible gateway.")
    # A server in a pod listens on every interface.
    parser.add_argument("--host", default=os.environ.get("GATEWAY_HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GATEWAY_PORT", "8080")))
    parser.add_argument("--snapshot", default=os.environ.get("GATEWAY_SNAPSHOT", "var/gateway/snapshot.json"),
                        help="The routing snapshot written by `manage.py gateway_snapshot`.")
    parser.add_argument("--refresh-seconds", type=float, default=2.0,
                        help="How often the snapshot file is checked for a change.")
    parser.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024,
                        help="Bodies over this are refused with 413.")
    parser.add_argument("--redis-url", default=os.environ.get("GATEWAY_REDIS_URL", ""),
                        help="Where limits are shared between replicas; empty keeps them per replica.")
    parser.add_argument("--redis-prefix", default=os.environ.get("GATEWAY_REDIS_PREFIX", "gw:"),
                        help="Prefix of the gateway's Redis keys (installs sharing one Redis each take their own).")
    parser.add_argument("--replicas", type=int, default=int(os.environ.get("GATEWAY_REPLICAS", "1")),
                        help="Gateway replicas: while Redis is unreachable each enforces 1/replicas of a limit.")
    parser.add_argument("--default-max-tokens", type=int, default=1024,
                        help="Completion tokens reserved against token limits when a request sets no max_tokens.")
    parser.add_argument("--lease-seconds", type=float, default=600.0,
                        help="A concurrency slot lapses after this if its request never ends (a crashed replica).")
    parser.add_argument("--database-url", default=os.environ.get("GATEWAY_DATABASE_URL", ""),
                        help="Where usage rows are written (batched, off the request path); empty meters nothing.")
    parser.add_argument("--database-url-file", default=os.environ.get("GATEWAY_DATABASE_URL_FILE", ""),
                        help="A file holding the database URL (a mounted secret), read when --database-url is "
                             "not given.")
    parser.add_argument("--spool-rows", type=int, default=100_000,
                        help="Usage rows held in memory while PostgreSQL is unreachable (without --spool-dir, or while "
                             "the spool cannot be written); past it the oldest go.")
    parser.add_argument("--spool-dir", default=os.environ.get("GATEWAY_SPOOL_DIR", ""),
                        help="A directory where usage rows wait on disk until PostgreSQL has them, so neither an "
                             "outage nor a crash loses them; empty keeps them in memory only.")
    parser.add_argument("--spool-bytes", type=int, default=256 * 2**20,
                        help="The spool directory's bound; past it the oldest rows go (logged and counted).")
    parser.add_argument("--upstream-connect-timeout", type=float, default=5.0,
                        help="Seconds to connect to an engine or router; past it the answer is 503.")
    parser.add_argument("--upstream-reconnect-seconds", type=float, default=15.0,
                        help="When every upstream of a service the snapshot names has refused the connection (pods "
                             "replaced since), how long a request waits for the snapshot to name a new one; past it "
                             "the answer is 503.")
    parser.add_argument("--upstream-timeout", type=float, default=300.0,
                        help="Seconds an upstream may stay silent (before its answer, or between two chunks "
                             "of a stream); past it the answer is 504.")
    parser.add_argument("--backend-pod-header", default=os.environ.get("GATEWAY_BACKEND_POD_HEADER", ""),
                        help="A response header in which a service's router names the engine pod it chose; usage "
                             "rows then name that pod (kubesim's routers: x-kubesim-backend). Empty: the router's "
                             "pod.")
    parser.add_argument("--activation-queue", type=int, default=100,
                        help="Requests held per service while it wakes from zero (the waiting room: the door's queue); "
                             "past it the answer is 429 queue_full.")
    parser.add_argument("--activation-wait", type=float, default=120.0,
                        help="Seconds a request is held for a service waking from zero, the waiting room's "
                             "time-to-live; past it the answer is 429 queue_timeout.")
    parser.add_argument("--no-queue", action="store_true",
                        help="Forward every admitted request at once, in order of arrival, however saturated its "
                             "service (no bands, no fair share).")
    parser.add_argument("--queue-cap", type=int, default=1000,
                        help="Requests waiting per service and band on this replica; past it the answer is 429 "
                             "queue_full.")
    parser.add_argument("--queue-ttl", type=float, default=30.0,
                        help="Seconds a request waits for a saturated service; past it the answer is 429 "
                             "queue_timeout.")
    parser.add_argument("--queue-cap-lowest", type=int, default=10_000,
                        help="Requests that may wait in the lowest band (batch, best-effort) per service at this "
                             "replica; one more is answered 429 queue_full.")
    parser.add_argument("--queue-ttl-lowest", type=float, default=600.0,
                        help="The same for the lowest band (batch, best-effort), which waits for spare capacity.")
    parser.add_argument("--usage-flush-seconds", type=float, default=1.0,
                        help="How often queued usage rows are written.")
    parser.add_argument("--batch-slots-per-engine", type=int, default=4,
                        help="Batch lines start only while a service's requests in flight at this replica "
                             "(interactive and batch) are below this many per ready engine; 0: this replica runs no "
                             "batch lines (it still serves /v1/files and /v1/batches).")
    parser.add_argument("--batch-lease-seconds", type=float, default=60.0,
                        help="A batch a replica runs passes to another if its holder stops renewing it this long.")
    args = parser.parse_args(argv)
    if min(args.queue_cap, args.queue_cap_lowest) < 1 or args.queue_ttl <= 0 or args.queue_ttl_lowest <= 0:
        parser.error("--queue-cap and --queue-cap-lowest must be at least 1, --queue-ttl and --queue-ttl-lowest "
                     "above 0")
    if args.database_url_file and not args.database_url:
        try:
            with open(args.database_url_file) as handle:
                args.database_url = handle.read().strip()
        except OSError as exc:
            parser.error(f"--database-url-file {args.database_url_file}: {exc.strerror}")
    try:
        args.prefix_key = hash_key(os.environ)
    except ValueError as exc:
        parser.error(str(exc))
    if args.database_url and args.prefix_key is None:
        names = " or ".join(f"{name} (or {name}_FILE)" for name in KEY_SECRETS)
        parser.error(f"metering keys the prompts' prefix hashes with a secret the replicas share: set {names}")
    return args


def build(args: argparse.Namespace):
    """The ASGI application the options describe."""
    from gateway.activation import Activator
    from gateway.app import Gateway
    from gateway.batch_runner import BatchRunner
    from gateway.door import Door
    from gateway.limits import RequestLimiter
    from gateway.metering import UsageWriter
    from gateway.snapshot import SnapshotFile
    from gateway.upstream import Upstreams

    app = Gateway(SnapshotFile(args.snapshot), max_body_bytes=args.max_body_bytes,
                  refresh_seconds=args.refresh_seconds,
                  limiter=RequestLimiter(args.redis_url or None, replicas=args.replicas, prefix=args.redis_prefix,
                                         lease_ms=int(args.lease_seconds * 1000),
                                         default_max_tokens=args.default_max_tokens),
                  usage=UsageWriter(args.database_url, prefix_key=args.prefix_key, max_rows=args.spool_rows,
                                    interval=args.usage_flush_seconds, spool_dir=args.spool_dir or None,
                                    spool_bytes=args.spool_bytes)
                  if args.database_url else None,
                  door=Door(replicas=args.replicas, cap=args.queue_cap, ttl=args.queue_ttl,
                            lowest_ttl=args.queue_ttl_lowest, lowest_cap=args.queue_cap_lowest,
                            enabled=not args.no_queue),
                  activator=Activator(args.redis_url or None, max_held=args.activation_queue,
                                      max_wait=args.activation_wait),
                  upstreams=Upstreams(connect_timeout=args.upstream_connect_timeout,
                                      read_timeout=args.upstream_timeout,
                                      backend_pod_header=args.backend_pod_header,
                                      reconnect_seconds=args.upstream_reconnect_seconds))
    if args.database_url and args.batch_slots_per_engine > 0:
        app.runner = BatchRunner(app, args.database_url, slots_per_engine=args.batch_slots_per_engine,
                                 lease_seconds=args.batch_lease_seconds)
    return app


def main(argv=None) -> None:
    import uvicorn

    args = parse_args(argv)
    app = build(args)
    # uvicorn stops accepting on SIGTERM, waits for requests in flight, then runs the lifespan shutdown.
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=False,
                timeout_graceful_shutdown=25, loop="uvloop", http="httptools")


if __name__ == "__main__":
    main()
