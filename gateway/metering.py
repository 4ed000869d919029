"""Usage rows written off the request path: the request appends to a queue, a thread COPYs batches into
`gateway_usagerow`. With a spool directory every flush first moves the queue to disk (gateway/spool.py) and
writes from there, exactly once, so a database outage or a crash loses nothing (up to the spool's bound).
Without one, rows stay queued in memory while PostgreSQL is unreachable (up to `max_rows`; the oldest are
dropped past that, logged and counted) and the next batch retries. Shutdown flushes.

Nothing a client sends can stop metering: the text columns are made valid before a row is queued, a prompt
that cannot be hashed costs its row only the prompt's columns (counted as unprepared), and rows the database
refuses MAX_TRIES times in a row are written one by one, the refused ones set aside as dead letters (in the
spool's dead-letter file when there is a spool directory)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime

import psycopg

from gateway.prefix import materialize
from gateway.spool import MAX_TRIES, DeadLetters, DiskSpool, copy_rows, reason, refused, unreachable

log = logging.getLogger("gateway.metering")
TABLE = "gateway_usagerow"
COLUMNS = ("at", "tenant_id", "key_id", "service_id", "model", "pod", "status", "prompt_tokens",
           "cached_tokens", "completion_tokens", "ttft_ms", "duration_ms", "streamed", "disconnected", "added_ms",
           "prompt_chars", "prefix_blocks", "batch_id", "queued_ms", "shed")
CHARS_AT = COLUMNS.index("prompt_chars")  # a row's prefix_blocks may hold a gateway.prefix.Prompt until flushed
# The text columns and their bound in characters (UsageRow's max_length): what the gateway writes there is cut
# to it and made valid UTF-8 without NUL, whatever a request carried.
TEXT_CHARS = {"model": 200, "pod": 253}


def clean_text(value, limit: int) -> str:
    """`value` as text PostgreSQL takes: at most `limit` characters, lone surrogates and NULs replaced by U+FFFD."""
    text = (value if isinstance(value, str) else "" if value is None else str(value))[:limit]
    # Through UTF-16 a surrogate pair becomes its character and a lone surrogate U+FFFD.
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", "\ufffd")


class UsageWriter:
    def __init__(self, database_url: str, *, prefix_key: bytes, max_rows: int = 100_000, batch_rows: int = 1000,
                 interval: float = 1.0, spool_dir: str | None = None, spool_bytes: int = 256 * 2**20):
        self.database_url = database_url
        self.prefix_key = prefix_key  # gateway.prefix.hash_key: the prompts' prefix hashes are keyed with it
        self.rows: deque = deque()
        self.max_rows = max_rows
        self.batch_rows = batch_rows
        self.interval = interval
        self._dropped = 0
        self.copied = 0  # rows COPYed from the in-memory queue (the spool counts its own)
        self._copying = 0  # rows of the batch being COPYed now
        self.unprepared = 0  # rows written without their prompt's columns: it could not be hashed (only grows)
        self.failures = 0  # failed writes of the oldest queued batch in a row while the database answered
        self.database_ok = True
        self.dead_letters = DeadLetters(spool_dir, COLUMNS)
        self.spool = DiskSpool(spool_dir, table=TABLE, columns=COLUMNS, max_bytes=spool_bytes,
                               segment_rows=batch_rows, dead_letters=self.dead_letters) if spool_dir else None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="usage-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def record(self, **row) -> None:
        row.setdefault("at", datetime.now(UTC))
        for name, limit in TEXT_CHARS.items():
            row[name] = clean_text(row.get(name), limit)
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

    @property
    def quarantined(self) -> int:
        """Rows the database refused, set aside as dead letters (only grows)."""
        return self.dead_letters.count

    @property
    def failing(self) -> bool:
        """The oldest waiting rows failed to be written at the last try although the database answered."""
        return bool(self.failures or (self.spool and self.spool.failures))

    @property
    def stuck(self) -> bool:
        """The oldest waiting rows failed MAX_TRIES times in a row with the database answering, for a reason no
        row can be blamed for (a missing table or grant): they wait for an operator."""
        return self.database_ok and max(self.failures, self.spool.failures if self.spool else 0) >= MAX_TRIES

    @property
    def up(self) -> bool:
        """Rows reach PostgreSQL: it answers and takes them."""
        return self.database_ok and not self.failing

    def health(self) -> str:
        """Metering's state for /readyz: ok, behind (rows wait: the database is unreachable or failed them) or
        stuck (see `stuck`)."""
        return "stuck" if self.stuck else "ok" if self.up else "behind"

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
            rows = self._materialized(rows)
            appended = self.spool.append(rows)
            if appended < len(rows):  # a full or broken disk: the rest stay in memory, as without a spool
                with self._lock:
                    self.rows.extendleft(reversed(rows[appended:]))
            try:
                self.spool.replay(self.database_url)
            except Exception as exc:
                return self._failed(exc, self.spool.failures)
        else:
            self._materialize_queued()
        return self._copy_queued()

    def _materialized(self, rows: list[tuple]) -> list[tuple]:
        """The rows with their prompts hashed (gateway/prefix.py), one at a time: a prompt that cannot be
        costs its row the prompt's columns only, counted in `unprepared`."""
        out = []
        for row in rows:
            row, prepared = materialize(row, CHARS_AT, self.prefix_key)
            self.unprepared += not prepared
            out.append(row)
        return out

    def _materialize_queued(self) -> None:
        """Hash the queued rows' prompts (gateway/prefix.py) in this thread, outside the lock, so that a row
        waiting for the database keeps its prefix blocks rather than its request's body."""
        with self._lock:
            rows = list(self.rows)
            self.rows.clear()
            self._copying = len(rows)  # still counted as waiting meanwhile
        self._put_back(self._materialized(rows))  # before the rows recorded meanwhile

    def _put_back(self, rows: list[tuple]) -> None:
        """Queue `rows` again ahead of those recorded meanwhile; past `max_rows` the oldest go, counted."""
        with self._lock:
            self.rows.extendleft(reversed(rows))
            self._copying = 0
            while len(self.rows) > self.max_rows:
                self.rows.popleft()
                self._dropped += 1

    def _failed(self, exc: Exception, failures: int) -> bool:
        """Rows kept after `exc`: the database unreachable, or answering and failing them (`failures` times in
        a row), which is logged at the first failure and once they are stuck."""
        if unreachable(exc):
            if self.database_ok:
                log.warning("usage rows kept (%d waiting) while the database is unreachable: %s", self.waiting,
                            exc)
            self.database_ok = False
            return False
        self.database_ok = True
        if failures in (1, MAX_TRIES):
            log.error("usage rows kept (%d waiting): the database failed them %d time(s) in a row: %s",
                      self.waiting, failures, reason(exc))
        return False

    def _copy(self, rows: list[tuple]) -> None:
        with (psycopg.connect(self.database_url, connect_timeout=2) as conn, conn.cursor() as cursor):
            copy_rows(cursor, TABLE, COLUMNS, rows)

    def _copy_queued(self) -> bool:
        while True:
            with self._lock:
                batch = [self.rows.popleft() for _ in range(min(self.batch_rows, len(self.rows)))]
                self._copying = len(batch)
            if not batch:
                self._reachable()
                return True
            # A row recorded while the spool replayed has not been through `materialize` yet.
            batch = self._materialized(batch)
            try:
                self._copy(batch)
            except Exception as exc:
                self.failures += not unreachable(exc)
                if unreachable(exc) or not refused(exc) or self.failures < MAX_TRIES:
                    self._put_back(batch)
                    return self._failed(exc, self.failures)
                if not self._copy_one_by_one(batch):
                    return False
                continue
            self._written(len(batch))

    def _copy_one_by_one(self, batch: list[tuple]) -> bool:
        """A batch the database refused MAX_TRIES times, one row per transaction: the refused rows are set aside
        as dead letters; False (the rest queued again) when the database stops answering or taking rows."""
        log.error("a batch of %d usage rows refused %d times: written row by row", len(batch), self.failures)
        self.failures = 0  # tries of the row-by-row writing from here
        for at, row in enumerate(batch):
            try:
                self._copy([row])
            except Exception as exc:
                if not refused(exc):
                    self.failures += not unreachable(exc)
                    self._put_back(batch[at:])
                    return self._failed(exc, self.failures)
                self.dead_letters.add(row, reason(exc))
                with self._lock:
                    self._copying -= 1
            else:
                self._written(1)
        return True

    def _written(self, count: int) -> None:
        # Up before the rows leave the count of those waiting: a reader never sees none waiting and the
        # database down.
        self.failures = 0
        self._reachable()
        with self._lock:
            self.copied += count
            self._copying -= count

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
