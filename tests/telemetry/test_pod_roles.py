"""The roles status and the scraper report are the ones the renderer wrote: prefill and decode pods of a
disaggregated service, the leader and worker pods of a multi-node group (read back from kubesim)."""

from __future__ import annotations

from apps.serving.models import ServiceObservation
from apps.serving.names import service_selector
from apps.telemetry.models import PodStat
from workers import status as st
from workers.kube import kube_for
from workers.telemetry import engine_pods, scrape_all


def live_pods(service):
    return kube_for(service.cluster).list("v1", "Pod", label_selector=service_selector(service.uid))


def test_pd_pods_are_prefill_and_decode_in_status_and_telemetry(deploy, tenant_a):
    service = deploy(
        tenant_a, "split", deployment_mode="pd_disaggregated", routing_policy="round_robin",
        pools=[{"role": "prefill", "replicas": 1, "gpu_type": "h100-sxm-80gb"},
               {"role": "decode", "replicas": 2, "gpu_type": "h100-sxm-80gb"}],
    )
    pods = live_pods(service)
    engine = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] != "router"]
    assert sorted(st.pod_view(p).role for p in engine) == ["decode", "decode", "prefill"]
    observed = ServiceObservation.objects.get(service=service).pods
    assert sorted(p["role"] for p in observed if p["role"] != "router") == ["decode", "decode", "prefill"]

    assert sorted(p.role for p in engine_pods(pods, {str(service.uid): service.pk})) == ["decode", "decode", "prefill"]
    scrape_all()
    assert sorted(PodStat.objects.filter(service=service).values_list("role", flat=True)) == [
        "decode", "decode", "prefill"]


def test_multi_node_pods_are_leader_and_worker_and_only_the_leader_is_scraped(deploy, tenant_a):
    # Two single-L4 nodes hold one group of two ranks (pipeline parallel 2).
    service = deploy(
        tenant_a, "wide", deployment_mode="multi_node",
        engine_settings={"pipeline_parallel_size": 2, "max_model_len": 8192},
        pools=[{"role": "leader", "replicas": 1, "gpu_type": "l4-24gb", "gpus_per_replica": 1,
                "nodes_per_replica": 2}],
    )
    pods = live_pods(service)
    assert sorted(st.pod_view(p).role for p in pods) == ["leader", "worker"]
    observed = ServiceObservation.objects.get(service=service).pods
    assert sorted(p["role"] for p in observed) == ["leader", "worker"]

    scraped = engine_pods(pods, {str(service.uid): service.pk})
    assert [p.role for p in scraped] == ["leader"]
    scrape_all()
    assert list(PodStat.objects.filter(service=service).values_list("role", flat=True)) == ["leader"]
