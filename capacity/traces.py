"""Load traces: requests as they really came, read from the public formats people record them in.

One format inside (`Trace`: arrival second from the trace's start, prompt tokens, output tokens, an optional
prefix id), three formats outside:

- ``azure``: the Azure LLM inference traces (2023 and 2024) as CSV, ``TIMESTAMP,ContextTokens,GeneratedTokens``,
  with timestamps like ``2023-11-16 18:15:46.6805900`` (seven fractional digits, no zone: read as UTC);
- ``burstgpt``: BurstGPT's CSV, ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``, with
  timestamps in seconds from the trace's start; rows whose ``Response tokens`` is 0 are the trace's failed
  requests, which produced nothing, and are left out (counted in ``Trace.skipped``);
- ``jsonl``: one JSON object a line, ``{"timestamp", "prompt_tokens", "output_tokens", "prefix_id"?}``, the
  timestamp in seconds (any origin) or an ISO 8601 string.

Timestamps are bounded, since the lab's simulated clock (its time and memory) grows with a trace's span: a date
lies between EARLIEST and AHEAD past now, seconds between 0 and the Unix time of that latest date, and a trace
spans at most MAX_SPAN (a row past it is named by its line).

Every bad row is named by its line (1-based, the header is line 1 of a CSV) and its column, and nothing is
returned when any row is bad (`TraceError.problems` lists up to `MAX_PROBLEMS` of them). Rows may come in
any order (logs written by concurrent workers do); the trace is sorted by arrival.
Used by the what-if lab and the autoscaler benchmark alike (standard library only).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

FORMATS = ("azure", "burstgpt", "jsonl")
MAX_BYTES = 64 * 1024 * 1024  # an hour of a busy service is a few MB; a month of Azure's trace about 1 GB
MAX_ROWS = 2_000_000
MAX_PROBLEMS = 20
MAX_TOKENS = 10_000_000  # more than any context window: a number past it is a unit mix-up, not a request

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)  # no LLM trace is older; year 1 is a unit or parsing mix-up
AHEAD = timedelta(days=1)  # how far past now a timestamp may lie (clocks disagree by hours, not days)
MAX_SPAN = timedelta(days=7)  # from a trace's first arrival to its last (Azure's longest public trace is a week)
SHOWN_CHARS = 40  # of a bad value quoted back in a problem

COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}
TIME_COLUMN = {"azure": "TIMESTAMP", "burstgpt": "Timestamp", "jsonl": "timestamp"}


@dataclass(frozen=True)
class TraceRequest:
    t: float  # seconds from the trace's first arrival
    prompt_tokens: int
    output_tokens: int
    prefix_id: str | None = None


@dataclass
class Trace:
    format: str
    requests: list[TraceRequest]
    skipped: int = 0  # rows the format marks as failed requests (BurstGPT's zero-token responses)
    start: datetime | None = None  # the first arrival's wall-clock time (Azure's format has one)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].t if self.requests else 0.0

    def summary(self) -> dict:
        """Counts, the mean rate and the length percentiles a person checks an upload against."""
        prompts = sorted(r.prompt_tokens for r in self.requests)
        outputs = sorted(r.output_tokens for r in self.requests)
        return {
            "format": self.format,
            "requests": len(self.requests),
            "skipped": self.skipped,
            "duration_s": round(self.duration_s, 3),
            "rate_per_s": round(len(self.requests) / self.duration_s, 3) if self.duration_s > 0 else None,
            "prompt_tokens": {"p50": percentile(prompts, 0.5), "p95": percentile(prompts, 0.95)},
            "output_tokens": {"p50": percentile(outputs, 0.5), "p95": percentile(outputs, 0.95)},
            "with_prefix_id": sum(1 for r in self.requests if r.prefix_id is not None),
        }


def percentile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank percentile of an already sorted list (None when empty)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class TraceError(ValueError):
    """A trace that cannot be used; `problems` are sentences naming the line and the column."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


class _Problems:
    """The bad rows found so far, and the latest time a row may have (AHEAD past when parsing began)."""

    def __init__(self, now: datetime):
        self.items: list[str] = []
        self.more = 0
        self.latest = now + AHEAD

    def add(self, line: int, column: str | None, message: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            where = f"line {line}" + (f", column {column}" if column else "")
            self.items.append(f"{where}: {message}")
        else:
            self.more += 1

    def raise_if_any(self) -> None:
        if self.items:
            if self.more:
                self.items.append(f"and {self.more} more bad rows")
            raise TraceError(self.items)


def _shown(value) -> str:
    """A bad value as quoted in a problem: short, and never the whole of a nested array or object."""
    if isinstance(value, list | dict):
        return "an array" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _count(value, column: str, line: int, problems: _Problems, minimum: int) -> int | None:
    """A token count: a whole number from `minimum` to MAX_TOKENS ("12" and 12 and 12.0 are; "12.5" is not)."""
    number = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                problems.add(line, column, f"{_shown(value)} is not a whole number of tokens")
                return None
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) \
            or number != int(number):
        problems.add(line, column, f"{_shown(value)} is not a whole number of tokens")
        return None
    if not minimum <= number <= MAX_TOKENS:
        problems.add(line, column, f"{int(number)} is outside {minimum}–{MAX_TOKENS:,} tokens")
        return None
    return int(number)


def _seconds(value: str | float, column: str, line: int, problems: _Problems) -> float | None:
    """Seconds from any origin: from 0 to the Unix time of the latest allowed date."""
    try:
        number = float(value)
    except OverflowError:  # a JSON integer past a float's range
        number = math.inf
    except (TypeError, ValueError):
        problems.add(line, column, f"{_shown(value)} is not a number of seconds")
        return None
    latest = problems.latest.timestamp()
    if not (math.isfinite(number) and 0 <= number <= latest):
        problems.add(line, column, f"{_shown(value)} is not from 0 to {latest:.0f} seconds (seconds from the trace's "
                                   f"origin, or Unix time up to {AHEAD.days} d from now)")
        return None
    return number


def _wall_clock(value: str, column: str, line: int, problems: _Problems) -> float | None:
    """Seconds since the epoch of a date-time; more than six fractional digits (Azure's seven) are cut to six,
    a time without a zone is UTC."""
    text = str(value).strip()
    head, dot, fraction = text.partition(".")
    if dot:
        digits = "".join(ch for ch in fraction if ch.isdigit())
        zone = fraction[len(digits):]
        text = f"{head}.{digits[:6]}{zone}" if digits else text
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        problems.add(line, column, f"{_shown(value)} is not a date and time (e.g. 2023-11-16 18:15:46.6805900)")
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if not EARLIEST <= moment <= problems.latest:
        problems.add(line, column, f"{_shown(value)} is not from {EARLIEST:%Y-%m-%d} to "
                                   f"{problems.latest:%Y-%m-%d %H:%M} UTC ({AHEAD.days} d from now)")
        return None
    return moment.timestamp()


def _csv_rows(text: str, fmt: str, problems: _Problems) -> Iterable[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [name.strip() for name in (reader.fieldnames or [])]
        missing = [name for name in COLUMNS[fmt] if name not in header]
        if missing:
            found = ", ".join(header) if header else "nothing"
            problems.add(1, None, f"the {fmt} format needs the columns {', '.join(COLUMNS[fmt])}; "
                                  f"missing {', '.join(missing)} (the header has {found})")
            problems.raise_if_any()
        reader.fieldnames = header
        for row in reader:
            yield reader.line_num, row
    except csv.Error as exc:  # a field over the csv module's size limit: the rest of the file cannot be read
        problems.add(reader.line_num + 1, None, f"not CSV that can be read ({exc})")  # the line it stopped in
        problems.raise_if_any()


def _parse_azure(text: str, problems: _Problems) -> tuple[list[tuple[float, int, int, None, int]], int]:
    rows = []
    for line, row in _csv_rows(text, "azure", problems):
        t = _wall_clock(row.get("TIMESTAMP") or "", "TIMESTAMP", line, problems)
        prompt = _count(row.get("ContextTokens"), "ContextTokens", line, problems, 1)
        output = _count(row.get("GeneratedTokens"), "GeneratedTokens", line, problems, 0)
        if None not in (t, prompt, output):
            rows.append((t, prompt, max(output, 1), None, line))
    return rows, 0


def _parse_burstgpt(text: str, problems: _Problems) -> tuple[list[tuple[float, int, int, None, int]], int]:
    rows, failed = [], 0
    for line, row in _csv_rows(text, "burstgpt", problems):
        t = _seconds(row.get("Timestamp"), "Timestamp", line, problems)
        prompt = _count(row.get("Request tokens"), "Request tokens", line, problems, 0)
        output = _count(row.get("Response tokens"), "Response tokens", line, problems, 0)
        if None in (t, prompt, output):
            continue
        if output == 0:
            failed += 1
            continue
        rows.append((t, max(prompt, 1), output, None, line))
    return rows, failed


def _parse_jsonl(text: str, problems: _Problems) -> tuple[list[tuple[float, int, int, str | None, int]], int]:
    rows = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except RecursionError:  # nesting deeper than the interpreter's stack: a 400 like any bad row
            problems.add(line, None, "not JSON this parser reads (nested too deeply)")
            continue
        except ValueError as exc:
            problems.add(line, None, f"not JSON ({exc.msg})")
            continue
        if not isinstance(item, dict):
            problems.add(line, None, "must be a JSON object")
            continue
        unknown = sorted(set(item) - {"timestamp", "prompt_tokens", "output_tokens", "prefix_id"})
        if unknown:
            problems.add(line, unknown[0], "unknown field (expected timestamp, prompt_tokens, output_tokens, "
                                           "prefix_id)")
            continue
        stamp = item.get("timestamp")
        if isinstance(stamp, str):
            t = _wall_clock(stamp, "timestamp", line, problems)
        elif isinstance(stamp, int | float) and not isinstance(stamp, bool):
            t = _seconds(stamp, "timestamp", line, problems)
        else:
            problems.add(line, "timestamp", "required: seconds or an ISO 8601 date and time")
            t = None
        prompt = _count(item.get("prompt_tokens"), "prompt_tokens", line, problems, 1)
        output = _count(item.get("output_tokens"), "output_tokens", line, problems, 1)
        prefix = item.get("prefix_id")
        if prefix is not None and (not isinstance(prefix, str | int) or isinstance(prefix, bool)
                                   or len(str(prefix)) > 200):
            problems.add(line, "prefix_id", "must be a string or a whole number of at most 200 characters")
            continue
        if None not in (t, prompt, output):
            rows.append((t, prompt, output, None if prefix is None else str(prefix), line))
    return rows, 0


PARSERS = {"azure": _parse_azure, "burstgpt": _parse_burstgpt, "jsonl": _parse_jsonl}


def parse_trace(data: bytes | str, fmt: str, max_bytes: int = MAX_BYTES, max_rows: int = MAX_ROWS,
                now: datetime | None = None) -> Trace:
    """The trace in `data` (the file's bytes, UTF-8) read as `fmt`, its times bounded from `now` (the clock's by
    default); raises TraceError naming what is wrong."""
    if fmt not in PARSERS:
        raise TraceError([f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}"])
    size = len(data.encode() if isinstance(data, str) else data)
    if size > max_bytes:
        raise TraceError([f"the trace is {size:,} bytes, over the limit of {max_bytes:,}"])
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise TraceError([f"not UTF-8 text (byte {exc.start})"]) from None
    problems = _Problems(now or datetime.now(UTC))
    rows, skipped = PARSERS[fmt](data, problems)
    problems.raise_if_any()
    if len(rows) > max_rows:
        raise TraceError([f"the trace has {len(rows):,} requests, over the limit of {max_rows:,}"])
    if not rows:
        raise TraceError(["the trace has no requests"])
    rows.sort(key=lambda row: row[0])
    _check_span(rows, TIME_COLUMN[fmt], problems)
    origin = rows[0][0]
    start = datetime.fromtimestamp(origin, UTC) if fmt == "azure" else None
    return Trace(fmt, [TraceRequest(t - origin, p, o, prefix) for t, p, o, prefix, _ in rows], skipped, start)


def _check_span(rows: list[tuple], column: str, problems: _Problems) -> None:
    """Every row (sorted by arrival) within MAX_SPAN of the first; the rows past it are named."""
    origin, first_line = rows[0][0], rows[0][-1]
    for t, *_, line in rows:
        if t - origin > MAX_SPAN.total_seconds():
            problems.add(line, column, f"{(t - origin) / 86400:.1f} days after the first arrival (line {first_line}); "
                                       f"a trace spans at most {MAX_SPAN.days} days")
    problems.raise_if_any()
