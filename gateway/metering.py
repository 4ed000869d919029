"""Usage rows written off the request path: the request appends to a queue, a thread COPYs batches into
`gateway_usagerow`. While PostgreSQL is unreachable rows stay queued (in memory, up to `max_rows`; the
oldest are dropped past that, logged and counted) and the next batch retries; shutdown flushes."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime

import psycopg

log = logging.getLogger("gateway.metering")
TABLE = "gateway_usagerow"
COLUMNS = ("at", "tenant_id", "key_id", "service_id", "model", "pod", "status", "prompt_tokens",
           "cached_tokens", "completion_tokens", "ttft_ms", "duration_ms", "streamed", "disconnected")


class UsageWriter:
    def __init__(self, database_url: str, *, max_rows: int = 100_000, batch_rows: int = 1000,
                 interval: float = 1.0):
        self.database_url = database_url
        self.rows: deque = deque()
        self.max_rows = max_rows
        self.batch_rows = batch_rows
        self.interval = interval
        self.dropped = 0
        self.written = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="usage-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def record(self, **row) -> None:
        row.setdefault("at", datetime.now(UTC))
        with self._lock:
            if len(self.rows) >= self.max_rows:
                self.rows.popleft()
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.error("usage spool full (%d rows): %d oldest rows dropped", self.max_rows, self.dropped)
            self.rows.append(tuple(row.get(name) for name in COLUMNS))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> bool:
        """Write everything queued; False (rows kept, in order) when the database could not take them."""
        while True:
            with self._lock:
                batch = [self.rows.popleft() for _ in range(min(self.batch_rows, len(self.rows)))]
            if not batch:
                return True
            try:
                with (psycopg.connect(self.database_url, connect_timeout=2) as conn, conn.cursor() as cursor,
                      cursor.copy(f"COPY {TABLE} ({', '.join(COLUMNS)}) FROM STDIN") as copy):
                    for row in batch:
                        copy.write_row(row)
            except psycopg.Error as exc:
                with self._lock:
                    self.rows.extendleft(reversed(batch))
                    while len(self.rows) > self.max_rows:
                        self.rows.popleft()
                        self.dropped += 1
                log.warning("usage rows kept (%d queued): %s", len(self.rows), exc)
                return False
            self.written += len(batch)

    def close(self, grace: float = 10.0) -> None:
        """Stop the thread and flush, retrying for up to `grace` seconds (the drain on SIGTERM)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=grace)
        deadline = time.monotonic() + grace
        while not self.flush() and time.monotonic() < deadline:
            time.sleep(0.5)
        if self.rows:
            log.error("%d usage rows not written at shutdown", len(self.rows))
