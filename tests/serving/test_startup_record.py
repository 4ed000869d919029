"""A service's start-ups: recorded from its pods' phase Events, modelled for the page, and estimated for the node a
new replica would land on (the autoscaler's cold start). Figures worked by hand from capacity/startup.py's rates."""

import pytest

from apps.clusters.models import Cluster, GpuNode
from apps.serving.models import ServiceObservation
from apps.serving.startup import cold_start_estimate, landing_cache, panel, record
from enginevocab.labels import model_held_label
from tests.factories import InferenceServiceFactory, PoolFactory

pytestmark = pytest.mark.django_db


def event(pod, reason, message):
    return {"reason": reason, "message": message, "involvedObject": {"kind": "Pod", "name": pod}}


COLD = [
    event("chat-a", "Pulled", 'Successfully pulled image "vllm/vllm-openai"'),
    event("chat-a", "WeightsDownloaded", "download 16 GB at 200 MB/s in 80.3 s from none"),
    event("chat-a", "WeightsRead", "read 16 GB at 2 GB/s in 8.0 s from none"),
    event("chat-a", "WeightsLoaded", "load 16 GB at 25 GB/s in 0.6 s from none"),
    event("chat-a", "EngineInitialized", "init in 20.0 s from none"),
    event("chat-b", "WeightsRead", "read 16 GB at 5 GB/s in 3.2 s from node"),
    event("chat-b", "Unhealthy", "Readiness probe failed: read 1 in 2.0 s from node"),  # not a phase event
]


def test_each_pods_phases_are_read_from_its_events_and_kept_newest_first():
    previous = [{"pod": "old", "cache": "cluster", "phases": {"read": 8.0}, "total_s": 8.0}]
    rows = record(COLD, previous)
    assert rows == [
        {"pod": "chat-a", "cache": "none", "phases": {"download": 80.3, "read": 8.0, "load": 0.6, "init": 20.0},
         "total_s": 108.9},
        {"pod": "chat-b", "cache": "node", "phases": {"read": 3.2}, "total_s": 3.2},
        previous[0],
    ]
    assert record([], rows) == rows  # a pass that read no events keeps what was recorded


@pytest.fixture
def service():
    svc = InferenceServiceFactory(name="chat", pools=[])
    PoolFactory(service=svc, gpu_type="l4-24gb", gpus_per_replica=1)
    return svc


def node(service, name, allocated=0, held=True):
    labels = {model_held_label(service.model.name): "true"} if held else {}
    return GpuNode.objects.create(cluster=service.cluster, name=name, gpu_product="NVIDIA-L4", gpu_count=1,
                                  allocatable=1, allocated=allocated, labels=labels)


def test_a_new_replica_lands_on_a_free_node_holding_the_weights_else_reads_the_cluster_cache(service):
    pool = service.pools.get()
    assert landing_cache(service, pool, recorded=[]) == "none"
    node(service, "busy", allocated=1)
    node(service, "cold", held=False)
    assert landing_cache(service, pool, recorded=[{"pod": "x"}]) == "cluster"  # the warm node is full
    node(service, "warm")
    assert landing_cache(service, pool, recorded=[{"pod": "x"}]) == "node"


def test_the_cold_start_estimate_is_the_phase_of_the_node_it_will_land_on(service):
    pool = service.pools.get()
    assert cold_start_estimate(service, pool) is None  # nothing recorded: the autoscaler keeps its measured time
    ServiceObservation.objects.create(service=service, startups=[
        {"pod": "chat-a", "cache": "cluster", "phases": {"read": 8.0, "load": 0.6, "init": 20.0}, "total_s": 28.6}])
    service.refresh_from_db()
    assert cold_start_estimate(service, pool) == 28.6  # no warm node: the recorded cluster-cache start-up
    node(service, "warm")
    # A free node holds the weights: none recorded from a node copy, so the modelled one: 16.06 GB from the disk
    # at 5 GB/s = 3.212 s, over PCIe 4.0 at 25.2 GB/s = 0.637 s, init 20 s.
    assert cold_start_estimate(service, pool) == 23.8


def test_the_page_states_cold_warm_and_node_local_start_ups(service):
    figures = panel(service)
    # Cold: 80.3 s download + 8.03 s read + 0.637 s load + 20 s init = 108.97 s; warm 28.67 s; node-local 23.85 s.
    assert figures["sentence"] == ("cold 1 m 49 s (download 16 GB at 200 MB/s), "
                                   "warm 29 s (read 16 GB at 2 GB/s, init 20 s); "
                                   "from a node holding the weights 24 s (read 16 GB at 5 GB/s)")
    assert figures["gpu"] == "L4" and figures["recorded"] == []


def test_on_a_cluster_without_node_copies_the_page_offers_no_node_local_figure(service):
    Cluster.objects.filter(pk=service.cluster_id).update(node_model_volume="none")
    service.refresh_from_db()
    assert panel(service)["sentence"] == ("cold 1 m 49 s (download 16 GB at 200 MB/s), "
                                          "warm 29 s (read 16 GB at 2 GB/s, init 20 s); "
                                          "its cluster keeps no node-local copies")


def test_the_startups_command_prints_the_modelled_and_recorded_start_ups(service):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    ServiceObservation.objects.create(service=service, startups=record(COLD[:5], []))
    out = StringIO()
    call_command("startups", f"{service.tenant.slug}/chat", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == (f"{service.tenant.slug}/chat on L4: cold 1 m 49 s (download 16 GB at 200 MB/s), warm 29 s "
                        "(read 16 GB at 2 GB/s, init 20 s); from a node holding the weights 24 s (read 16 GB at 5 GB/s)")
    assert lines[1] == ("  chat-a: weights downloaded from the source, ready in 1 m 49 s "
                        "(download 1 m 20 s, read 8.0 s, load 0.6 s, init 20.0 s)")
    with pytest.raises(CommandError, match="service: no service 'nobody/chat'"):
        call_command("startups", "nobody/chat")
