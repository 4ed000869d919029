"""The Files and Batch API's rows in PostgreSQL, read and written by the gateway with psycopg (the gateway has no
ORM; the tables are apps/gateway/models.py's File, Batch and BatchLine). Every function here blocks: the gateway
calls them through `asyncio.to_thread`, never on its event loop. Every read and write of a tenant's row names
the tenant, so another tenant's id is the same answer as an unknown one."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from gateway import batch_vocab as bv

FILES, BATCHES = "gateway_file", "gateway_batch"  # the tables list_rows pages
FILE_FIELDS = "id, tenant_id, key_id, purpose, filename, bytes, lines, created_at"
BATCH_TIMES = ("created_at", "expires_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
               "expired_at", "cancelling_at", "cancelled_at")


def connect(database_url: str) -> psycopg.Connection:
    return psycopg.connect(database_url, connect_timeout=5, row_factory=dict_row)


def seconds(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def file_object(row: dict) -> dict:
    """A File row as OpenAI's API shows it."""
    return {"id": row["id"], "object": "file", "bytes": row["bytes"], "created_at": seconds(row["created_at"]),
            "filename": row["filename"], "purpose": row["purpose"], "status": "processed", "expires_at": None,
            "status_details": None}


def batch_object(row: dict) -> dict:
    """A Batch row as OpenAI's API shows it."""
    return {"id": row["id"], "object": "batch", "endpoint": row["endpoint"], "input_file_id": row["input_file_id"],
            "completion_window": row["completion_window"], "status": row["status"],
            "output_file_id": row["output_file_id"] or None, "error_file_id": row["error_file_id"] or None,
            "errors": {"object": "list", "data": row["errors"]} if row["errors"] else None,
            "metadata": row["metadata"], "model": None,
            "request_counts": {"total": row["total"], "completed": row["completed"], "failed": row["failed"]},
            "usage": {"input_tokens": row["prompt_tokens"], "output_tokens": row["completion_tokens"],
                      "total_tokens": row["prompt_tokens"] + row["completion_tokens"],
                      "input_tokens_details": {"cached_tokens": row["cached_tokens"]},
                      "output_tokens_details": {"reasoning_tokens": 0}},
            **{name: seconds(row[name]) for name in BATCH_TIMES}}


def insert_file(database_url: str, *, tenant_id: int, key_id: int | None, purpose: str, filename: str,
                content: bytes, lines: int, conn: psycopg.Connection | None = None) -> dict:
    row = {"id": bv.new_id(bv.FILE_ID_PREFIX), "tenant_id": tenant_id, "key_id": key_id, "purpose": purpose,
           "filename": filename, "bytes": len(content), "lines": lines, "created_at": datetime.now(UTC)}
    sql = ("INSERT INTO gateway_file (id, tenant_id, key_id, purpose, filename, bytes, lines, created_at, content) "
           "VALUES (%(id)s, %(tenant_id)s, %(key_id)s, %(purpose)s, %(filename)s, %(bytes)s, %(lines)s, "
           "%(created_at)s, %(content)s)")
    if conn is not None:
        conn.execute(sql, {**row, "content": content})
    else:
        with connect(database_url) as own:
            own.execute(sql, {**row, "content": content})
    return row


def get_file(database_url: str, tenant_id: int, file_id: str) -> dict | None:
    with connect(database_url) as conn:
        return conn.execute("SELECT id, tenant_id, key_id, purpose, filename, bytes, lines, created_at "
                            "FROM gateway_file WHERE id = %s AND tenant_id = %s",
                            (file_id, tenant_id)).fetchone()


def file_content(database_url: str, tenant_id: int, file_id: str) -> bytes | None:
    with connect(database_url) as conn:
        row = conn.execute("SELECT content FROM gateway_file WHERE id = %s AND tenant_id = %s",
                           (file_id, tenant_id)).fetchone()
    return None if row is None else bytes(row["content"])


def list_rows(database_url: str, table: str, fields: str, tenant_id: int, *, after: str | None, limit: int,
              order: str = "desc", where: str = "", params: tuple = ()) -> tuple[list[dict], bool]:
    """A page of the tenant's rows of `table` by creation, newest first (or oldest with order "asc"), after the
    row `after` (OpenAI's cursor); whether more follow."""
    direction, compare = ("ASC", ">") if order == "asc" else ("DESC", "<")
    cursor = ""
    if after:
        # The cursor row is looked up within the tenant too: another tenant's id pages from the start.
        cursor = (f" AND (created_at, id) {compare} (SELECT created_at, id FROM {table} "  # noqa: S608
                  "WHERE id = %s AND tenant_id = %s)")
        params = (*params, after, tenant_id)
    with connect(database_url) as conn:
        # `table`, `fields` and `where` are this module's constants and the API's; every value is a parameter.
        rows = conn.execute(
            f"SELECT {fields} FROM {table} WHERE tenant_id = %s{where}{cursor} "  # noqa: S608
            f"ORDER BY created_at {direction}, id {direction} LIMIT %s", (tenant_id, *params, limit + 1)).fetchall()
    return rows[:limit], len(rows) > limit


def delete_file(database_url: str, tenant_id: int, file_id: str) -> str:
    """"deleted", "missing", or "in_use" (the input of a batch still running: kept)."""
    with connect(database_url) as conn:
        busy = conn.execute("SELECT 1 FROM gateway_batch WHERE input_file_id = %s AND tenant_id = %s "
                            "AND status = ANY(%s)", (file_id, tenant_id, list(bv.ACTIVE))).fetchone()
        if busy:
            return "in_use"
        gone = conn.execute("DELETE FROM gateway_file WHERE id = %s AND tenant_id = %s", (file_id, tenant_id))
        return "deleted" if gone.rowcount else "missing"


def insert_batch(database_url: str, *, tenant_id: int, key_id: int, endpoint: str, input_file: dict,
                 metadata: dict | None) -> dict:
    now = datetime.now(UTC)
    row = {"id": bv.new_id(bv.BATCH_ID_PREFIX), "tenant_id": tenant_id, "key_id": key_id, "endpoint": endpoint,
           "input_file_id": input_file["id"], "completion_window": bv.COMPLETION_WINDOW,
           "metadata": json.dumps(metadata) if metadata is not None else None, "total": input_file["lines"],
           "created_at": now, "expires_at": now + timedelta(seconds=bv.WINDOW_SECONDS), "status": bv.VALIDATING}
    with connect(database_url) as conn:
        return conn.execute(
            "INSERT INTO gateway_batch (id, tenant_id, key_id, endpoint, input_file_id, completion_window, metadata, "
            "total, created_at, expires_at, status, output_file_id, error_file_id, completed, failed, "
            "prompt_tokens, cached_tokens, completion_tokens, next_line, claimed_by) VALUES (%(id)s, "
            "%(tenant_id)s, %(key_id)s, %(endpoint)s, %(input_file_id)s, %(completion_window)s, %(metadata)s, "
            "%(total)s, %(created_at)s, %(expires_at)s, %(status)s, '', '', 0, 0, 0, 0, 0, 1, '') "
            "RETURNING *", row).fetchone()


def get_batch(database_url: str, tenant_id: int, batch_id: str) -> dict | None:
    with connect(database_url) as conn:
        return conn.execute("SELECT * FROM gateway_batch WHERE id = %s AND tenant_id = %s",
                            (batch_id, tenant_id)).fetchone()


def cancel_batch(database_url: str, tenant_id: int, batch_id: str) -> dict | None:
    """Ask the runner to stop the batch (lines in flight finish; the output so far is kept): `cancelling`
    until it has, at once `cancelled` when no line has started. Returns the batch; None when it is unknown."""
    with connect(database_url) as conn:
        conn.execute(
            "UPDATE gateway_batch SET status = %s, cancelling_at = now() WHERE id = %s AND tenant_id = %s "
            "AND status = ANY(%s)", (bv.CANCELLING, batch_id, tenant_id, list(bv.CANCELLABLE)))
        return conn.execute("SELECT * FROM gateway_batch WHERE id = %s AND tenant_id = %s",
                            (batch_id, tenant_id)).fetchone()


# The runner's side (gateway/batch_runner.py): claim a batch under a lease, save answered lines with the
# progress they make in one transaction, write the output and error files once every line is answered.

def claim_batch(database_url: str, owner: str, lease_seconds: float) -> dict | None:
    """The oldest active batch no replica holds (or whose holder's lease lapsed), now held by `owner`."""
    with connect(database_url) as conn:
        return conn.execute(
            "UPDATE gateway_batch SET claimed_by = %(owner)s, claimed_until = now() + %(lease)s * interval '1 second', "
            "status = CASE WHEN status = %(validating)s THEN %(in_progress)s ELSE status END, "
            "in_progress_at = CASE WHEN status = %(validating)s THEN now() ELSE in_progress_at END "
            "WHERE id = (SELECT id FROM gateway_batch WHERE status = ANY(%(active)s) "
            "AND (claimed_until IS NULL OR claimed_until < now()) ORDER BY created_at LIMIT 1 "
            "FOR UPDATE SKIP LOCKED) RETURNING *",
            {"owner": owner, "lease": lease_seconds, "active": list(bv.ACTIVE), "validating": bv.VALIDATING,
             "in_progress": bv.IN_PROGRESS}).fetchone()


def input_lines(database_url: str, batch: dict) -> bytes | None:
    """The batch's input file's content (None once it is gone)."""
    return file_content(database_url, batch["tenant_id"], batch["input_file_id"])


def renew(database_url: str, batch_id: str, owner: str, lease_seconds: float) -> str | None:
    """Extend `owner`'s lease; the batch's status now, or None when another replica holds it."""
    with connect(database_url) as conn:
        row = conn.execute("UPDATE gateway_batch SET claimed_until = now() + %s * interval '1 second' "
                           "WHERE id = %s AND claimed_by = %s RETURNING status",
                           (lease_seconds, batch_id, owner)).fetchone()
    return None if row is None else row["status"]


def save_lines(database_url: str, batch_id: str, owner: str, lines: list[tuple[int, bool, str]], *,
               next_line: int, tokens: tuple[int, int, int], lease_seconds: float) -> str | None:
    """Keep answered `lines` (number, failed, output line) and the progress they make; the batch's status
    now (a cancel shows here), or None when `owner` no longer holds it (its lease lapsed and another took it)."""
    failed = sum(1 for _, bad, _ in lines if bad)
    with connect(database_url) as conn:
        row = conn.execute(
            "UPDATE gateway_batch SET next_line = %s, completed = completed + %s, failed = failed + %s, "
            "prompt_tokens = prompt_tokens + %s, cached_tokens = cached_tokens + %s, "
            "completion_tokens = completion_tokens + %s, claimed_until = now() + %s * interval '1 second' "
            "WHERE id = %s AND claimed_by = %s RETURNING status",
            (next_line, len(lines) - failed, failed, *tokens, lease_seconds, batch_id, owner)).fetchone()
        if row is None:
            conn.rollback()
            return None
        if lines:
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO gateway_batchline (batch_id, line, failed, body) "
                                   "VALUES (%s, %s, %s, %s)", [(batch_id, *line) for line in lines])
        return row["status"]


def finish_batch(database_url: str, batch: dict, owner: str, status: str, errors: list | None = None) -> bool:
    """Write the output file (answered lines) and the error file (refused and failed lines), each only when it
    has lines, and end the batch in `status`; False when `owner` no longer holds it."""
    stamp = {bv.COMPLETED: "completed_at", bv.CANCELLED: "cancelled_at", bv.EXPIRED: "expired_at",
             bv.FAILED: "failed_at"}[status]
    with connect(database_url) as conn, conn.transaction():
        held = conn.execute("SELECT id FROM gateway_batch WHERE id = %s AND claimed_by = %s FOR UPDATE",
                            (batch["id"], owner)).fetchone()
        if held is None:
            return False
        files = {}
        for failed, name in ((False, "output"), (True, "error")):
            bodies = [r["body"] for r in conn.execute(
                "SELECT body FROM gateway_batchline WHERE batch_id = %s AND failed = %s ORDER BY line",
                (batch["id"], failed))]
            if bodies:
                files[name] = insert_file(database_url, tenant_id=batch["tenant_id"], key_id=None,
                                          purpose=bv.PURPOSE_OUTPUT, filename=f"{batch['id']}_{name}.jsonl",
                                          content=("\n".join(bodies) + "\n").encode(),
                                          lines=len(bodies), conn=conn)["id"]
        conn.execute(
            # `stamp` is one of four column names above; every value is a parameter.
            f"UPDATE gateway_batch SET status = %s, {stamp} = now(), "  # noqa: S608
            "finalizing_at = coalesce(finalizing_at, now()), "
            "output_file_id = %s, error_file_id = %s, errors = %s, claimed_by = '', claimed_until = NULL "
            "WHERE id = %s", (status, files.get("output", ""), files.get("error", ""),
                              json.dumps(errors) if errors else None, batch["id"]))
        conn.execute("DELETE FROM gateway_batchline WHERE batch_id = %s", (batch["id"],))
        return True
