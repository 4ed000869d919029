"""Admission read back from Kueue's Workload objects (their status as Kueue writes it: QuotaReserved, Admitted,
Evicted and Preempted conditions with messages), stored on the service in words, a preemption audited once."""

from __future__ import annotations

from apps.core.models import AuditEntry
from apps.serving.admission import from_workloads, record_workloads
from apps.serving.models import InferenceService
from tests.factories import InferenceServiceFactory


def workload(name: str, *conditions: tuple[str, str, str, str]) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "tenant-acme"},
            "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m,
                                       "lastTransitionTime": "2026-12-06T12:03:00Z"} for t, s, r, m in conditions]}}


ADMITTED = workload("pod-chat-a", ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue acme"),
                    ("Admitted", "True", "Admitted", "The workload is admitted"))
BORROWING = workload("pod-chat-b", ("QuotaReserved", "True", "QuotaReserved",
                                    "Quota reserved in ClusterQueue acme, borrowing 1 L4 from globex"),
                     ("Admitted", "True", "Admitted", "The workload is admitted"))
PENDING = workload("pod-chat-c", ("QuotaReserved", "False", "Pending",
                                  "3rd in acme's queue; the cohort has no free L4"))
PREEMPTED = workload(
    "pod-chat-d",
    ("Evicted", "True", "Preempted", "preempted by globex/prod-chat (production 1000 > best-effort 0) to reclaim "
                                     "globex's nominal quota"),
    ("Preempted", "True", "InCohortReclamation", "preempted by globex/prod-chat (production 1000 > best-effort 0) "
                                                 "to reclaim globex's nominal quota"),
    ("QuotaReserved", "False", "Preempted", "preempted"), ("Admitted", "False", "NoReservation", "no reservation"))


def test_all_admitted_says_what_was_borrowed_from_whom():
    assert from_workloads([ADMITTED]) == {"state": "admitted", "reason": "Admitted"}
    assert from_workloads([ADMITTED, BORROWING, BORROWING]) == {
        "state": "admitted", "reason": "Admitted on borrowed quota (2 L4 from globex)"}
    two = workload("pod-chat-e", ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue acme, "
                                  "borrowing 1 H100 80GB from globex, 2 H100 80GB from initech"),
                   ("Admitted", "True", "Admitted", "The workload is admitted"))
    assert from_workloads([two]) == {
        "state": "admitted", "reason": "Admitted on borrowed quota (1 H100 80GB from globex, 2 H100 80GB from initech)"}


def test_one_pending_workload_makes_the_service_wait_with_kueues_reason():
    assert from_workloads([ADMITTED, PENDING]) == {
        "state": "waiting", "reason": "Waiting for quota: 3rd in acme's queue; the cohort has no free L4"}


def test_a_preempted_workload_says_by_whom_and_when(settings):
    settings.TIME_ZONE = "UTC"
    assert from_workloads([ADMITTED, PENDING, PREEMPTED]) == {
        "state": "preempted", "reason": "Preempted by globex/prod-chat (production 1000 > best-effort 0) to reclaim "
                                        "globex's nominal quota at 12:03"}


def test_no_workload_yet_leaves_the_stored_answer():
    assert from_workloads([]) is None


def test_a_preemption_read_back_is_stored_and_audited_once(db):
    service = InferenceServiceFactory()
    for _ in range(2):
        record_workloads(InferenceService.objects.get(pk=service.pk), [ADMITTED, PREEMPTED])
    assert InferenceService.objects.get(pk=service.pk).admission["state"] == "preempted"
    entries = AuditEntry.objects.filter(object_id=str(service.pk), actor_repr="admission:controlplane")
    assert entries.count() == 1
    assert entries.get().after["admission"]["reason"].startswith("Preempted by globex/prod-chat")
