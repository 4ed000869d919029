"""Audit changes in people's words (apps/core/audit_display.py): names instead of ids, yes/no, choice
labels, key paths into nested settings and pools. Expected lines are written from the inputs."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType

from apps.clusters.models import Cluster
from apps.core.audit_display import Change, describe_changes
from apps.core.models import AuditEntry
from apps.serving.models import InferenceService
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory

pytestmark = pytest.mark.django_db


def entry(model, before, after):
    return AuditEntry(content_type=ContentType.objects.get_for_model(model), before=before, after=after)


def test_related_objects_are_named_and_settings_are_key_paths():
    small, large = ModelFactory(name="llama-8b"), ModelFactory(name="llama-70b")
    runtime = RuntimeFactory(name="vllm-stable")
    before = {"model": small.pk, "runtime": runtime.pk, "routing_policy": "round_robin", "generation": 1,
              "engine_settings": {"max_model_len": 8192, "kv_cache_dtype": "auto"}, "updated": "2026-01-01"}
    after = {"model": large.pk, "runtime": runtime.pk, "routing_policy": "session", "generation": 2,
             "engine_settings": {"max_model_len": 16384, "kv_cache_dtype": "auto", "enable_prefix_caching": True},
             "updated": "2026-01-02"}
    assert describe_changes(entry(InferenceService, before, after)) == [
        Change("engine_settings.enable_prefix_caching", "–", "yes"),
        Change("engine_settings.max_model_len", "8192", "16384"),
        Change("generation", "1", "2"),
        Change("model", "llama-8b", "llama-70b"),
        Change("routing_policy", "Round robin", "Session affinity (sticky by header)"),
    ]


def test_pools_are_keyed_by_role_and_a_deleted_object_says_so():
    cluster = ClusterFactory(name="east")
    before = {"cluster": 987654, "pools": [{"role": "engine", "replicas": 1, "gpu_type": "l4-24gb"}]}
    after = {"cluster": cluster.pk, "pools": [{"role": "engine", "replicas": 2, "gpu_type": "l4-24gb"},
                                               {"role": "prefill", "replicas": 1, "gpu_type": "l4-24gb"}]}
    assert describe_changes(entry(InferenceService, before, after)) == [
        Change("cluster", "#987654 (deleted)", "east"),
        Change("pools[engine].replicas", "1", "2"),
        Change("pools[prefill].gpu_type", "–", "l4-24gb"),
        Change("pools[prefill].replicas", "–", "1"),
    ]


def test_booleans_read_yes_or_no_and_a_deletion_lists_what_was_there():
    gone = entry(Cluster, {"name": "east", "insecure_simulator": True, "description": "", "labels": []}, None)
    assert describe_changes(gone) == [Change("insecure_simulator", "yes", "–"), Change("name", "east", "–")]
    flipped = entry(Cluster, {"open_to_all_tenants": False, "labels": ["a"]},
                    {"open_to_all_tenants": True, "labels": ["a", "b"]})
    assert describe_changes(flipped) == [Change("labels", "a", "a, b"), Change("open_to_all_tenants", "no", "yes")]

