"""The batch runner: a task in each gateway replica that holds one batch at a time (a lease in PostgreSQL, so
replicas share the work and a crashed one's batch is taken over), reads its input file and sends each line
through the gateway's own request path (`Gateway.run_line`: the key's limits, metering, upstreams) in the lowest
band, only while the line's service has spare capacity. Lines go in windows; each window's answers and the
progress they make are saved together, so a batch resumes after its last saved window and a cancel or the
end of the completion window is seen between two windows. A line that is not a request goes to the error file
with its line number; the batch goes on."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
from collections import Counter
from datetime import UTC, datetime, timedelta

from gateway import batch_store as store
from gateway import batch_vocab as bv
from gateway.batch_lines import answered, checked_line, custom_id_of, refused, split_lines
from gateway.names import choose
from gateway.validation import Invalid

log = logging.getLogger("gateway.batch_runner")
RETRIED = {429: "rate_limit_exceeded", 503: "no_ready_replica"}  # answers a line waits out rather than fails on
MAX_RETRY_WAIT = 5.0  # seconds between two tries of a line refused for now
SPARE_POLL = 0.05  # seconds between two looks for spare capacity
KEY_GRACE = timedelta(minutes=2)  # how long a batch's key may be missing from the snapshot before it fails
HEARTBEAT = 2.0  # at most this many seconds between two renewals of the lease (a cancel is seen then)


class BatchRunner:
    def __init__(self, gateway, database_url: str, *, slots_per_engine: int, lease_seconds: float = 60.0,
                 poll_seconds: float = 1.0, window: int = 16):
        self.gateway = gateway
        self.database_url = database_url
        # Requests in flight per ready engine of a service (interactive and batch together) below which a
        # batch line may start: above it the engines' capacity is the interactive requests'.
        self.slots_per_engine = slots_per_engine
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.window = window
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.running: Counter = Counter()  # batch lines in flight, by service
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                batch = await asyncio.to_thread(store.claim_batch, self.database_url, self.owner, self.lease_seconds)
                if batch is None:
                    await asyncio.sleep(self.poll_seconds)
                else:
                    await self._work(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # the database away, or a bug: the lease lapses and the batch is taken up again
                log.exception("the batch runner failed; trying again")
                await asyncio.sleep(self.poll_seconds)

    async def _work(self, batch: dict) -> None:
        if batch["status"] == bv.CANCELLING:
            return await self._finish(batch, bv.CANCELLED)
        key = self.gateway.key_by_id(batch["key_id"])
        if key is None and datetime.now(UTC) - batch["created_at"] < KEY_GRACE:
            # A key issued moments ago may not be in this replica's snapshot yet: the batch is taken up again
            # once the lease lapses.
            return None
        content = await asyncio.to_thread(store.input_lines, self.database_url, batch)
        if key is None or content is None:
            problem = ("key_unusable", "The key that created the batch is revoked or expired.") if key is None \
                else ("input_file_deleted", "The batch's input file was deleted.")
            return await self._finish(batch, bv.FAILED, [{"code": problem[0], "message": problem[1], "line": None}])
        lines, seen = split_lines(content), set()
        for raw in lines[:batch["next_line"] - 1]:  # the custom ids of the lines run before a resume
            _prepared(0, raw, batch["endpoint"], seen)
        windows = asyncio.ensure_future(self._windows(batch, key, lines, seen))
        try:
            # The lease is renewed while lines run (a window may wait long for spare capacity), and a cancel,
            # the end of the completion window or a lost lease stop the lines in flight.
            while not (await asyncio.wait({windows}, timeout=min(self.lease_seconds / 3, HEARTBEAT)))[0]:
                status = await asyncio.to_thread(store.renew, self.database_url, batch["id"], self.owner,
                                                 self.lease_seconds)
                expired = datetime.now(UTC) >= batch["expires_at"]
                if status is None or status == bv.CANCELLING or expired:
                    windows.cancel()
                    await asyncio.gather(windows, return_exceptions=True)
                    outcome = None if status is None else bv.CANCELLED if status == bv.CANCELLING else bv.EXPIRED
                    break
            else:
                outcome = windows.result()
        finally:
            windows.cancel()
        if outcome is None:
            log.warning("batch %s: its lease passed to another replica", batch["id"])
        else:
            await self._finish(batch, outcome)
        return None

    async def _windows(self, batch: dict, key: dict, lines: list[bytes], seen: set[str]) -> str | None:
        """Run the lines from the batch's next one, a window at a time, each window saved with its progress;
        the status to end the batch in, or None when another replica took the batch over."""
        number = batch["next_line"]
        while number <= len(lines):
            if datetime.now(UTC) >= batch["expires_at"]:
                return bv.EXPIRED
            window = [_prepared(n, raw, batch["endpoint"], seen)
                      for n, raw in enumerate(lines[number - 1:number - 1 + self.window], number)]
            answers = await asyncio.gather(*(self._answer(batch, key, line) for line in window))
            number += len(window)
            tokens = tuple(sum(a[3][i] for a in answers) for i in range(3))
            status = await asyncio.to_thread(
                store.save_lines, self.database_url, batch["id"], self.owner, [a[:3] for a in answers],
                next_line=number, tokens=tokens, lease_seconds=self.lease_seconds)
            if status is None or status == bv.CANCELLING:
                return None if status is None else bv.CANCELLED
        return bv.COMPLETED

    async def _answer(self, batch: dict, key: dict, line: tuple) -> tuple[int, bool, str, tuple]:
        """(line number, failed, the output or error file's line, (prompt, cached, completion) tokens)."""
        number, custom_id, body = line
        if isinstance(body, Invalid):
            return number, True, refused(custom_id, number, body), (0, 0, 0)
        payload = json.dumps(body).encode()
        model = body.get("model") if isinstance(body.get("model"), str) else None
        candidates = self.gateway.routing().models_for(key).get(model) if model else None
        service = choose(candidates, model, self.gateway.door.load)[0] if candidates else None
        while True:
            if service is not None:
                await self._slot(service)
            try:
                status, answer, usage = await self.gateway.run_line(key, batch["endpoint"], payload, batch["id"])
            finally:
                if service is not None:
                    self.running[service["id"]] -= 1
            if status not in RETRIED or _code(answer) != RETRIED[status] or datetime.now(UTC) >= batch["expires_at"]:
                break
            await asyncio.sleep(MAX_RETRY_WAIT)  # a key's limit, or no engine ready: the line waits its turn
        return (number, status >= 400, answered(custom_id, status, answer),
                (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens))

    async def _slot(self, service: dict) -> None:
        """Wait for spare capacity on the service and take a slot of it (given back by the caller)."""
        while not self.spare(service):
            await asyncio.sleep(SPARE_POLL)
            service = self.gateway.routing().service(service["id"]) or service
        self.running[service["id"]] += 1

    def spare(self, service: dict) -> bool:
        """Whether the service's ready engines have room for one more line beside the interactive requests this
        replica has in flight to them, and the door sees spare capacity (room below its headroom, the engines
        neither queueing nor out of KV cache by the snapshot's signals)."""
        capacity = service.get("ready_engines", 0) * self.slots_per_engine
        return (self.gateway.in_flight[service["id"]] + self.running[service["id"]] < capacity
                and self.gateway.door.spare(service))

    async def _finish(self, batch: dict, status: str, errors: list | None = None) -> None:
        if await asyncio.to_thread(store.finish_batch, self.database_url, batch, self.owner, status, errors):
            log.info("batch %s %s", batch["id"], status)


def _prepared(number: int, raw: bytes, endpoint: str, seen: set[str]) -> tuple[int, str | None, dict | Invalid]:
    """(number, custom_id, body) of a line, its body an Invalid when the line is not a request the batch sends."""
    try:
        custom_id, body = checked_line(raw, endpoint, seen)
    except Invalid as exc:
        return number, custom_id_of(raw), exc
    return number, custom_id, body


def _code(answer: bytes) -> str | None:
    try:
        return json.loads(answer)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
