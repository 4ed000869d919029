"""Usage rows written off the request path: the request appends to a queue, a thread COPYs batches into
`gateway_usagerow`. With a spool directory every flush first moves the queue to disk (gateway/spool.py) and
writes from there, exactly once, so a database outage or a crash loses nothing (up to the spool's bound).
Without one, rows stay queued in memory while PostgreSQL is unreachable (up to `max_rows`; the oldest are
dropped past that, logged and counted) and the next batch retries. Shutdown flushes."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime

import psycopg

from gateway.prefix import materialize
from gateway.spool import DiskSpool

log = logging.getLogger("gateway.metering")
TABLE = "gateway_usagerow"
COLUMNS = ("at", "tenant_id", "key_id", "service_id", "model", "pod", "status", "prompt_tokens",
           "cached_tokens", "completion_tokens", "ttft_ms", "duration_ms", "streamed", "disconnected", "added_ms",
           "prompt_chars", "prefix_blocks")
CHARS_AT = COLUMNS.index("prompt_chars")  # a row's prefix_blocks may hold a gateway.prefix.Prompt until flushed


class UsageWriter:
    def __init__(self, database_url: str, *, max_rows: int = 100_000, batch_rows: int = 1000,
                 interval: float = 1.0, spool_dir: str | None = None, spool_bytes: int = 256 * 2**20):
        self.database_url = database_url
        self.rows: deque = deque()
        self.max_rows = max_rows
        self.batch_rows = batch_rows
        self.interval = interval
        self._dropped = 0
        self.copied = 0  # rows COPYed from the in-memory queue (the spool counts its own)
        self._copying = 0  # rows of the batch being COPYed now
        self.database_ok = True
        self.spool = DiskSpool(spool_dir, table=TABLE, columns=COLUMNS, max_bytes=spool_bytes,
                               segment_rows=batch_rows) if spool_dir else None
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
                self._dropped += 1
                if self._dropped == 1 or self._dropped % 1000 == 0:
                    log.error("usage queue full (%d rows): %d oldest rows dropped", self.max_rows, self._dropped)
            self.rows.append(tuple(row.get(name) for name in COLUMNS))

    @property
    def dropped(self) -> int:
        """Rows lost to a full queue or spool."""
        return self._dropped + (self.spool.dropped if self.spool else 0)

    @property
    def waiting(self) -> int:
        """Rows not written yet: queued in memory (a batch being copied included) plus spooled on disk."""
        return len(self.rows) + self._copying + (self.spool.rows if self.spool else 0)

    def _run(self) -> None:
        # At once on start: a spool left by an earlier process is replayed before anything else.
        while True:
            try:
                self.flush()
            except Exception:  # a disk or a bug must not stop metering: the next pass tries again
                log.exception("writing usage rows failed")
            if self._stop.wait(self.interval):
                return

    @property
    def written(self) -> int:
        """Rows written since start, from the queue and from the spool; a segment committed just before the
        database went away counts too."""
        return self.copied + (self.spool.written if self.spool is not None else 0)

    def flush(self) -> bool:
        """Write everything queued (and spooled); False (rows kept, in order) when the database could not
        take them."""
        if self.spool is not None:
            with self._lock:
                rows = list(self.rows)
                self.rows.clear()
            rows = [materialize(row, CHARS_AT) for row in rows]
            appended = self.spool.append(rows)
            if appended < len(rows):  # a full or broken disk: the rest stay in memory, as without a spool
                with self._lock:
                    self.rows.extendleft(reversed(rows[appended:]))
            try:
                self.spool.replay(self.database_url)
            except psycopg.Error as exc:
                return self._unreachable(exc)
        else:
            self._materialize_queued()
        return self._copy_queued()

    def _materialize_queued(self) -> None:
        """Hash the queued rows' prompts (gateway/prefix.py) in this thread, outside the lock, so that a row
        waiting for the database keeps its prefix blocks rather than its request's body."""
        with self._lock:
            rows = list(self.rows)
            self.rows.clear()
            self._copying = len(rows)  # still counted as waiting meanwhile
        rows = [materialize(row, CHARS_AT) for row in rows]
        with self._lock:
            self.rows.extendleft(reversed(rows))  # before the rows recorded meanwhile
            self._copying = 0
            while len(self.rows) > self.max_rows:
                self.rows.popleft()
                self._dropped += 1

    def _unreachable(self, exc: Exception) -> bool:
        if self.database_ok:
            log.warning("usage rows kept (%d waiting) while the database is unreachable: %s", self.waiting, exc)
        self.database_ok = False
        return False

    def _copy_queued(self) -> bool:
        while True:
            with self._lock:
                batch = [self.rows.popleft() for _ in range(min(self.batch_rows, len(self.rows)))]
                self._copying = len(batch)
            if not batch:
                self._reachable()
                return True
            # A row recorded while the spool replayed has not been through `materialize` yet.
            batch = [materialize(row, CHARS_AT) for row in batch]
            try:
                with (psycopg.connect(self.database_url, connect_timeout=2) as conn, conn.cursor() as cursor,
                      cursor.copy(f"COPY {TABLE} ({', '.join(COLUMNS)}) FROM STDIN") as copy):
                    for row in batch:
                        copy.write_row(row)
            except psycopg.Error as exc:
                with self._lock:
                    self.rows.extendleft(reversed(batch))
                    self._copying = 0
                    while len(self.rows) > self.max_rows:
                        self.rows.popleft()
                        self._dropped += 1
                return self._unreachable(exc)
            # Up before the rows leave the count of those waiting: a reader never sees none waiting and
            # the database down.
            self._reachable()
            with self._lock:
                self.copied += len(batch)
                self._copying = 0

    def _reachable(self) -> None:
        if not self.database_ok:
            log.warning("the database is reachable again: usage rows written")
        self.database_ok = True

    def close(self, grace: float = 10.0) -> None:
        """Stop the thread and flush, retrying for up to `grace` seconds (the drain on SIGTERM)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=grace)
        deadline = time.monotonic() + grace
        # With a spool the rows are on disk after one flush, and the next start writes them: no retrying.
        while not self.flush() and self.spool is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if self.spool is not None:
            self.spool.seal()
        if self.rows:
            log.error("%d usage rows not written at shutdown", len(self.rows))
        elif self.waiting:
            log.warning("%d usage rows left in the spool, written at the next start", self.waiting)
