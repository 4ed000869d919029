"""Objects of a service deleted by someone else are put back within seconds, not at the next drift check.

Every worker process's watch caches (`workers.kubecache`) see each DELETED event of the kinds the control
plane applies. `install` (run once per worker, by `workers.apps`) has those events handed to a thread of
the process, which batches the services' uids, looks the services up (one query per batch) and queues a
reconcile of each that is not being deleted, a couple of seconds later: by then every process's watch
has delivered the same event, so the pass, wherever it runs, reads the object as gone and applies it
again. `mark_queued` makes the worker processes that all saw the event queue one pass between them.
Pods are not restored (their controllers replace them; they come and go with every rollout), and a pass
that prunes an object of its own service causes at most one extra pass, which finds nothing to do.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import uuid

from django.db import close_old_connections, connection

from apps.serving.dispatch import clear_queued, mark_queued
from apps.serving.models import InferenceService
from controlplane.celery import app as celery_app
from controlplane.tasknames import RECONCILE_SERVICE
from workers import kubecache

log = logging.getLogger(__name__)

SETTLE_SECONDS = 2.0  # the reconcile waits this long: every process's watch has delivered the deletion
BATCH_SECONDS = 0.5  # deletions arriving together (a namespace going) are looked up together
IGNORED_KINDS = ("v1 Pod",)

_queue: queue.SimpleQueue[str] = queue.SimpleQueue()
_thread_pid: int | None = None
_lock = threading.Lock()


def install() -> None:
    """Hand this process's (and its forked children's) watch caches' deletions to `deleted`."""
    kubecache.on_deleted = deleted


def deleted(kind: str, uid: str) -> None:
    """A watch saw an object of service `uid` deleted (called on the watch's thread: no I/O here)."""
    global _thread_pid
    if kind in IGNORED_KINDS:
        return
    _queue.put(uid)
    with _lock:
        if _thread_pid != os.getpid():  # first deletion in this process (threads do not follow a fork)
            _thread_pid = os.getpid()
            threading.Thread(target=_run, name="restore deleted", daemon=True).start()


def _run() -> None:
    while True:
        uids = {_queue.get()}
        try:
            while True:
                uids.add(_queue.get(timeout=BATCH_SECONDS))
        except queue.Empty:
            pass
        try:
            queue_passes(uids)
        except Exception:  # the database or the broker is down: the next drift check restores it
            log.warning("could not queue passes to restore deleted objects of %d services", len(uids), exc_info=True)
        finally:
            close_old_connections()
            connection.close()  # a thread of its own: no connection held between deletions


def queue_passes(uids: set[str]) -> int:
    """Queue a reconcile of each service in `uids` that exists, is not being deleted and has none queued."""
    queued = 0
    services = InferenceService.objects.filter(uid__in=[u for u in uids if _is_uuid(u)],
                                               deletion_requested_at__isnull=True)
    for pk in services.values_list("pk", flat=True):
        if not mark_queued(pk):
            continue  # a pass is queued already (another process saw the same deletion)
        try:
            celery_app.send_task(RECONCILE_SERVICE, args=[pk], countdown=SETTLE_SECONDS, retry=False,
                                 ignore_result=True)
        except Exception:
            clear_queued(pk)  # the broker is down: the resync queues it later
            raise
        log.info("reconcile %s queued: an object of it was deleted on the cluster", pk)
        queued += 1
    return queued


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
