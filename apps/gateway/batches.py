"""Batches as the portal starts and stops them: the same rows the gateway's `/v1/files` and `/v1/batches` write
(gateway/batch_store.py), under the same rules (gateway/batch_lines.py, gateway/batch_vocab.py), so a batch
started here is run by the gateway's batch runner like one a client created."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.gateway.models import Batch, BatchStatus, File, InferenceKey
from gateway import batch_vocab as bv


def start_batch(*, key: InferenceKey, endpoint: str, filename: str, content: bytes, lines: int, actor) -> Batch:
    """Store `content` as the tenant's batch file and queue a batch of it run as `key` (checked by the caller
    with gateway.batch_lines.checked_file)."""
    now = timezone.now()
    with transaction.atomic():
        upload = File.objects.create(id=bv.new_id(bv.FILE_ID_PREFIX), tenant=key.tenant, key_id=key.pk,
                                     purpose=bv.PURPOSE_INPUT, filename=filename[:bv.MAX_FILENAME_CHARS],
                                     bytes=len(content), lines=lines, content=content, created_at=now)
        batch = Batch.objects.create(id=bv.new_id(bv.BATCH_ID_PREFIX), tenant=key.tenant, key_id=key.pk,
                                     endpoint=endpoint, input_file_id=upload.id, total=lines, created_at=now,
                                     expires_at=now + timedelta(seconds=bv.WINDOW_SECONDS))
        record_change(actor=actor, obj=batch, action=AuditAction.CREATE, via=AuditVia.PORTAL,
                      after={"key": key.name, "endpoint": endpoint, "input_file_id": upload.id, "lines": lines})
    return batch


def cancel_batch(batch: Batch, *, actor) -> bool:
    """Ask the runner to stop `batch` (as the gateway's cancel does); False when it is past stopping."""
    with transaction.atomic():
        changed = Batch.objects.filter(pk=batch.pk, status__in=bv.CANCELLABLE) \
            .update(status=BatchStatus.CANCELLING, cancelling_at=timezone.now())
        if changed:
            record_change(actor=actor, obj=batch, action=AuditAction.UPDATE, via=AuditVia.PORTAL,
                          before={"status": batch.status}, after={"status": BatchStatus.CANCELLING})
    return bool(changed)
