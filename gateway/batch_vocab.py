"""The Batch API's vocabulary, one definition for the gateway that serves it and the control plane that keeps
its tables (apps/gateway/models.py) and shows it (the portal's Batches page): bounds, statuses, id prefixes."""

from __future__ import annotations

import secrets

MAX_FILE_BYTES = 64 * 2**20  # an uploaded batch file (OpenAI's own bound is 200 MB; rows live in PostgreSQL)
MAX_FILE_LINES = 50_000  # requests in one batch file, OpenAI's bound
MAX_FILENAME_CHARS = 255
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512  # OpenAI's bounds on metadata
MAX_CUSTOM_ID_CHARS = 512
COMPLETION_WINDOW = "24h"  # the only window OpenAI offers
WINDOW_SECONDS = 24 * 3600
LIST_LIMIT = 100  # the default and the largest page of a list (batches and files)

FILE_ID_PREFIX, BATCH_ID_PREFIX, REQUEST_ID_PREFIX = "file-", "batch_", "batch_req_"
ID_CHARS = 40  # the longest id: a prefix and 24 hex digits fit
ID_PATTERN = rf"[A-Za-z0-9_-]{{1,{ID_CHARS}}}"  # what may be looked up as an id (anything else is no row's)



def new_id(prefix: str) -> str:
    """A fresh id of a file, a batch or a request, as OpenAI shapes them (`file-…`, `batch_…`)."""
    return prefix + secrets.token_hex(12)


# What a file is for: uploaded as a batch's input, or written by the gateway as a batch's output or errors.
PURPOSE_INPUT, PURPOSE_OUTPUT = "batch", "batch_output"
PURPOSES = (PURPOSE_INPUT, PURPOSE_OUTPUT)

# A batch's statuses, as OpenAI names them.
VALIDATING, IN_PROGRESS, FINALIZING, COMPLETED = "validating", "in_progress", "finalizing", "completed"
FAILED, EXPIRED, CANCELLING, CANCELLED = "failed", "expired", "cancelling", "cancelled"
STATUSES = (VALIDATING, FAILED, IN_PROGRESS, FINALIZING, COMPLETED, EXPIRED, CANCELLING, CANCELLED)
ACTIVE = (VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING)  # statuses a runner still works on
FINAL = (FAILED, COMPLETED, EXPIRED, CANCELLED)
CANCELLABLE = (VALIDATING, IN_PROGRESS)  # a cancel moves these to CANCELLING; the runner then ends them

# The header a batch line is sent with: the lowest band (the priority code reads it; a client may send it too).
PRIORITY_HEADER, BATCH_PRIORITY = b"x-priority", b"batch"
