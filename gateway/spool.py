"""The usage rows' spool on disk (`--spool-dir`): what the gateway metered, kept in append-only segment files
until PostgreSQL has committed it, so neither a database outage nor a crash of the gateway loses it.

Every flush appends the rows queued in memory to the open segment (one JSON line per row, fsynced), then
replays the segments oldest first: each in one transaction that inserts the segment's marker
(`gateway_usagebatch`, its id is the segment's uuid) and COPYs its rows, then the file is deleted. A crash
between that commit and the deletion leaves a segment whose marker exists: replaying it again inserts no
marker and so writes no row, which makes replay idempotent at the cost of one marker row per segment (deleted
again once its file is gone) instead of a unique id and index on every usage row.

A segment is appended only by the process that opened it, and sealed (never appended again) before it is
replayed, so a committed segment's content cannot grow afterwards. A line cut short by a crash mid-append is
set aside (below). The spool is bounded by `max_bytes`: past it the oldest segments are deleted, their rows
counted as dropped and logged.

A segment the database refuses MAX_TRIES times in a row for its rows' values (`refused`: a data or integrity
error, or one raised encoding a row), not for being unreachable, would hold every later row back for good. It
is renamed `….rowwise` (so a restart goes on the same way) and written one row per transaction, each with a
marker of its own (a uuid5 of the segment's id and the row's line): the rows the database takes go in exactly
once, the ones it refuses go to the dead-letter file (DEAD_LETTER, JSON lines: the row, the reason, the time,
the segment and line) and the segment is deleted. A line that cannot be read back, or that a crash cut short,
goes there too once its segment is done. A crash in the middle may repeat a dead-letter line (same segment and
line), never a usage row.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

log = logging.getLogger("gateway.spool")
SUFFIX = ".rows"
ROW_BY_ROW = ".rowwise"  # a segment the database refused MAX_TRIES times, being written one row at a time
SEGMENT_NAME = re.compile(r"(?P<sequence>\d{12})-(?P<id>[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})"
                          r"(?P<suffix>\.rows|\.rowwise)")
MAX_TRIES = 3  # writes of the same oldest rows refused in a row before they are written one by one
DEAD_LETTER = "dead-letter.jsonl"
# Past it a refused row is only logged and counted; with --spool-bytes (256 MiB) it fits the pod's 320 MiB emptyDir.
DEAD_LETTER_BYTES = 16 * 2**20


def unreachable(exc: BaseException) -> bool:
    """The database could not be reached, or the connection broke: the rows wait for it, however long."""
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def refused(exc: BaseException) -> bool:
    """The rows' own values were refused, by PostgreSQL (a data or integrity error) or while psycopg encoded
    them (no SQLSTATE: a lone surrogate, a NUL, a value it cannot adapt); not the database's state (a missing
    table or grant), which no row can be blamed for."""
    if isinstance(exc, psycopg.Error):
        return isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)) or (
            exc.sqlstate is None and not unreachable(exc))
    return isinstance(exc, (ValueError, TypeError))


def copy_rows(cursor, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def jsonable(value):
    return value.isoformat() if isinstance(value, datetime) else repr(value)


class DeadLetters:
    """Usage rows that could not be written, set aside with the reason: logged and counted always, and kept as
    JSON lines in `directory`'s DEAD_LETTER file when there is one (the spool's), up to DEAD_LETTER_BYTES."""

    def __init__(self, directory: str | None, columns: tuple[str, ...]):
        self.path = os.path.join(directory, DEAD_LETTER) if directory else None
        self.columns = columns
        self.count = 0  # rows set aside since start (only grows)

    def add(self, row: tuple | str, reason: str, **where) -> None:
        self.count += 1
        entry = {"at": datetime.now(UTC).isoformat(), "reason": reason, **where,
                 "row": dict(zip(self.columns, row, strict=False)) if isinstance(row, tuple) else row}
        line = json.dumps(entry, default=jsonable, separators=(",", ":")).encode() + b"\n"
        log.error("usage row set aside (%d since start): %s %s", self.count, reason, where or "")
        if self.path is None:
            return
        try:
            with open(self.path, "ab") as file:
                if file.tell() + len(line) > DEAD_LETTER_BYTES:
                    log.error("dead-letter file %s is full: the row above is only logged", self.path)
                    return
                file.write(line)
                os.fsync(file.fileno())
        except OSError as exc:
            log.error("dead-letter file %s not writable: %s", self.path, exc)


def reason(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"[:1000]


@dataclass
class Segment:
    path: str
    id: str
    rows: int
    bytes: int
    rowwise: bool = False


class DiskSpool:
    def __init__(self, directory: str, *, table: str, columns: tuple[str, ...], max_bytes: int,
                 segment_rows: int = 1000, dead_letters: DeadLetters | None = None):
        os.makedirs(directory, exist_ok=True)
        self.directory, self.table, self.columns = directory, table, columns
        self.max_bytes, self.segment_rows = max_bytes, segment_rows
        self.dead_letters = dead_letters or DeadLetters(directory, columns)
        self.failures = 0  # failed writes of the oldest segment in a row while the database answered
        self.segments: deque[Segment] = deque()
        self.rows = self.bytes = self.dropped = 0
        self.written = 0  # rows committed by this process, counted per segment as each one commits
        self._open = None  # this process's segment being appended, a binary file
        self._done: list[str] = []  # markers of segments committed and deleted: to delete in turn
        self.sequence = 0
        for name in sorted(os.listdir(directory)):
            match = SEGMENT_NAME.fullmatch(name)
            if match is None:
                continue  # not a segment: left alone
            path = os.path.join(directory, name)
            with open(path, "rb") as file:
                data = file.read()
            self._add(Segment(path, match["id"], data.count(b"\n"), len(data), match["suffix"] == ROW_BY_ROW))
            self.sequence = max(self.sequence, int(match["sequence"]))
        if self.segments:
            log.warning("usage spool %s holds %d rows from before this start: replaying them", directory, self.rows)

    def _add(self, segment: Segment) -> None:
        self.segments.append(segment)
        self.rows += segment.rows
        self.bytes += segment.bytes

    def append(self, rows: list[tuple]) -> int:
        """Append rows to the open segment (a new one every `segment_rows`) and fsync; how many made it
        (fewer when the disk refuses: the segment is then cut back to its last whole row and sealed)."""
        appended = 0
        try:
            for row in rows:
                line = json.dumps([value.isoformat() if isinstance(value, datetime) else value for value in row],
                                  separators=(",", ":")).encode() + b"\n"
                self._make_room(len(line))
                if self._open is None or self.segments[-1].rows >= self.segment_rows:
                    self._start_segment()
                self._write(line)
                segment = self.segments[-1]
                segment.rows, segment.bytes = segment.rows + 1, segment.bytes + len(line)
                self.rows, self.bytes = self.rows + 1, self.bytes + len(line)
                appended += 1
            if self._open is not None:
                os.fsync(self._open.fileno())
        except OSError as exc:
            log.error("usage spool %s not writable after %d of %d rows: %s", self.directory, appended, len(rows), exc)
            if self._open is not None:
                try:
                    os.ftruncate(self._open.fileno(), self.segments[-1].bytes)
                finally:
                    self.seal()
        return appended

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._open.write(view):]

    def _start_segment(self) -> None:
        self.seal()
        self.sequence += 1
        segment_id = str(uuid.uuid4())
        path = os.path.join(self.directory, f"{self.sequence:012d}-{segment_id}{SUFFIX}")
        self._open = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by seal()
        self._add(Segment(path, segment_id, 0, 0))
        self._sync_directory()

    def _sync_directory(self) -> None:
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # a new or renamed file's name survives a power cut too
        finally:
            os.close(directory)

    def _make_room(self, size: int) -> None:
        while self.segments and self.bytes + size > self.max_bytes:
            oldest = self.segments[0]
            if self._open is not None and len(self.segments) == 1:
                self.seal()
            self._remove(oldest)
            self.dropped += oldest.rows
            log.error("usage spool full (%d bytes): %d oldest rows dropped (%d in all)", self.max_bytes,
                      oldest.rows, self.dropped)

    def _remove(self, segment: Segment) -> None:
        os.unlink(segment.path)
        self.segments.popleft()
        self.rows -= segment.rows
        self.bytes -= segment.bytes

    def seal(self) -> None:
        """Never append to the open segment again (fsynced: a power cut keeps it too)."""
        if self._open is not None:
            file, self._open = self._open, None
            try:
                os.fsync(file.fileno())
            finally:
                file.close()

    def replay(self, database_url: str) -> None:
        """Write every segment, oldest first, each exactly once, counting each committed segment's rows in
        `written` as it commits (one committed before a crash counts none). Raises what stopped it (psycopg's
        errors when the database is unreachable): what is left stays, what was committed before is counted."""
        if not self.segments and not self._done:
            return
        with psycopg.connect(database_url, connect_timeout=2, autocommit=True) as conn:
            # The open segment too, once the database answers: what is appended from now on goes to a new one
            # (while it is unreachable, rows keep filling the open segment up to `segment_rows`).
            self.seal()
            while self.segments:
                segment = self.segments[0]
                rows, unreadable = self._read(segment)
                try:
                    fresh = self._write_rowwise(conn, segment, rows) if segment.rowwise \
                        else self._write_whole(conn, segment, rows)
                except Exception as exc:
                    if unreachable(exc):
                        raise
                    self.failures += 1
                    if segment.rowwise or not refused(exc) or self.failures < MAX_TRIES:
                        raise
                    log.error("usage spool segment %s refused %d times (%s): written row by row, the rows the "
                              "database refuses set aside in %s", segment.path, self.failures, reason(exc),
                              self.dead_letters.path)
                    self._to_rowwise(segment)
                    self.failures = 0  # tries of the row-by-row writing from here
                    continue
                if fresh:
                    for line, text, why in unreadable:
                        self.dead_letters.add(text, why, segment=segment.id, line=line)
                self.failures = 0
                self._remove(segment)
                self._done.append(segment.id)
            conn.execute("DELETE FROM gateway_usagebatch WHERE id = ANY(%s::uuid[])", (self._done,))
            self._done = []

    def _mark(self, cursor, marker: str) -> bool:
        """Record `marker` in the transaction; False when it was recorded before (its rows are in)."""
        cursor.execute("INSERT INTO gateway_usagebatch (id, at) VALUES (%s, now()) ON CONFLICT DO NOTHING", (marker,))
        return cursor.rowcount == 1

    def _write_whole(self, conn, segment: Segment, rows: list[tuple[int, tuple]]) -> bool:
        """The segment in one transaction with its marker; False when it had been committed before."""
        with conn.transaction(), conn.cursor() as cursor:
            if not self._mark(cursor, segment.id):
                log.warning("usage spool segment %s was committed before: not written again", segment.path)
                return False
            copy_rows(cursor, self.table, self.columns, [row for _, row in rows])
        self.written += len(rows)
        return True

    def _write_rowwise(self, conn, segment: Segment, rows: list[tuple[int, tuple]]) -> bool:
        """Each row in a transaction of its own with its own marker; a row refused goes to the dead letters and
        its marker is recorded after it (a crash between them repeats the dead letter, never the row)."""
        for line, row in rows:
            marker = str(uuid.uuid5(uuid.UUID(segment.id), str(line)))
            try:
                with conn.transaction(), conn.cursor() as cursor:
                    if self._mark(cursor, marker):
                        copy_rows(cursor, self.table, self.columns, [row])
                        self.written += 1
            except Exception as exc:
                if not refused(exc):
                    raise
                self.dead_letters.add(row, reason(exc), segment=segment.id, line=line)
                with conn.transaction(), conn.cursor() as cursor:
                    self._mark(cursor, marker)
            self._done.append(marker)
        return True

    def _to_rowwise(self, segment: Segment) -> None:
        path = segment.path.removesuffix(SUFFIX) + ROW_BY_ROW
        os.rename(segment.path, path)
        self._sync_directory()
        segment.path, segment.rowwise = path, True

    def _read(self, segment: Segment) -> tuple[list[tuple[int, tuple]], list[tuple[int, str, str]]]:
        """(the segment's rows by line number, its lines that cannot be rows: line number, text, why)."""
        with open(segment.path, "rb") as file:
            data = file.read()
        rows, unreadable = [], []
        lines = data.split(b"\n")
        for number, line in enumerate(lines[:-1]):
            try:
                values = json.loads(line)
                values[0] = datetime.fromisoformat(values[0])  # `at`, the first column
                # A segment spooled by an older gateway lacks the columns added since (at the end): null.
                rows.append((number, tuple(values) + (None,) * (len(self.columns) - len(values))))
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                log.error("usage spool segment %s: line %d unreadable (%s)", segment.path, number, exc)
                unreadable.append((number, line.decode(errors="replace"), f"unreadable: {reason(exc)}"))
        if lines[-1]:  # a last line without its newline was cut short by a crash mid-append
            log.error("usage spool segment %s: its last line was cut short (a crash mid-append)", segment.path)
            unreadable.append((len(lines) - 1, lines[-1].decode(errors="replace"), "cut short by a crash"))
        return rows, unreadable
