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
skipped. The spool is bounded by `max_bytes`: past it the oldest segments are deleted, their rows counted
as dropped and logged.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime

import psycopg

log = logging.getLogger("gateway.spool")
SUFFIX = ".rows"
SEGMENT_NAME = re.compile(r"(?P<sequence>\d{12})-(?P<id>[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})\.rows")


@dataclass
class Segment:
    path: str
    id: str
    rows: int
    bytes: int


class DiskSpool:
    def __init__(self, directory: str, *, table: str, columns: tuple[str, ...], max_bytes: int,
                 segment_rows: int = 1000):
        os.makedirs(directory, exist_ok=True)
        self.directory, self.table, self.columns = directory, table, columns
        self.max_bytes, self.segment_rows = max_bytes, segment_rows
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
            self._add(Segment(path, match["id"], data.count(b"\n"), len(data)))
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
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the new file's name survives a power cut too
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
        `written` as it commits (one committed before a crash counts none). psycopg.Error when the database is
        unreachable: what is left stays, and what was committed before the error is counted."""
        if not self.segments and not self._done:
            return
        with psycopg.connect(database_url, connect_timeout=2, autocommit=True) as conn:
            # The open segment too, once the database answers: what is appended from now on goes to a new one
            # (while it is unreachable, rows keep filling the open segment up to `segment_rows`).
            self.seal()
            while self.segments:
                segment = self.segments[0]
                rows = self._read(segment)
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.execute("INSERT INTO gateway_usagebatch (id, at) VALUES (%s, now()) ON CONFLICT DO NOTHING",
                                   (segment.id,))
                    if cursor.rowcount == 1:
                        with cursor.copy(f"COPY {self.table} ({', '.join(self.columns)}) FROM STDIN") as copy:
                            for row in rows:
                                copy.write_row(row)
                        self.written += len(rows)
                    else:
                        log.warning("usage spool segment %s was committed before: not written again", segment.path)
                self._remove(segment)
                self._done.append(segment.id)
            conn.execute("DELETE FROM gateway_usagebatch WHERE id = ANY(%s::uuid[])", (self._done,))
            self._done = []

    def _read(self, segment: Segment) -> list[tuple]:
        with open(segment.path, "rb") as file:
            data = file.read()
        rows = []
        for line in data.split(b"\n")[:-1]:  # a last line without its newline was cut short by a crash
            try:
                values = json.loads(line)
            except ValueError:
                log.error("usage spool segment %s: an unreadable line skipped", segment.path)
                continue
            values[0] = datetime.fromisoformat(values[0])  # `at`, the first column
            # A segment spooled by an older gateway lacks the columns added since (at the end): null.
            rows.append(tuple(values) + (None,) * (len(self.columns) - len(values)))
        if not data.endswith(b"\n") and data:
            log.error("usage spool segment %s: its last line was cut short (a crash mid-append), skipped", segment.path)
        return rows
