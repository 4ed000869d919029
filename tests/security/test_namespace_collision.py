"""Two tenants whose long slugs share their first 56 characters get two namespaces, and every path (apply,
quota, telemetry, delete) finds each tenant's own: nothing of one tenant lands in or is removed from the
other's."""

from __future__ import annotations

from apps.serving.actions import request_deletion
from apps.serving.models import InferenceService
from apps.serving.names import tenant_namespace
from apps.telemetry.models import PodStat
from tests.factories import ClusterFactory, InferenceServiceFactory, TenantFactory, UserFactory
from tests.polling import wait_for
from tests.telemetry.conftest import reconcile_until_ready
from workers.reconcile import reconcile
from workers.telemetry import scrape_cluster

HEAD = "research-" + "x" * 47  # with "tenant-" in front: exactly 63 characters, a DNS label's limit


def test_two_long_slugs_never_share_a_namespace_on_any_path(db, make_cluster):
    handle = make_cluster()
    cluster = ClusterFactory(name="sim", api_url=handle.url)
    one, two = TenantFactory(slug=HEAD + "-one", gpu_quota=8), TenantFactory(slug=HEAD + "-two", gpu_quota=16)
    pools = [{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}]
    first = reconcile_until_ready(InferenceServiceFactory(tenant=one, name="chat", cluster=cluster, pools=pools))
    second = reconcile_until_ready(InferenceServiceFactory(tenant=two, name="chat", cluster=cluster, pools=pools))

    ns_one, ns_two = tenant_namespace(one.slug), tenant_namespace(two.slug)
    assert ns_one != ns_two and len(ns_one) <= 63 and len(ns_two) <= 63
    for namespace, svc, quota in ((ns_one, first, "8"), (ns_two, second, "16")):
        (deployment,) = handle.apps.list_namespaced_deployment(namespace).items
        assert deployment.metadata.labels["controlplane.io/service-uid"] == str(svc.uid)
        (resource_quota,) = handle.core.list_namespaced_resource_quota(namespace).items
        assert resource_quota.spec.hard["requests.nvidia.com/gpu"] == quota

    scrape_cluster(cluster)  # telemetry finds each service's pod in its own namespace
    assert set(PodStat.objects.values_list("service__tenant__slug", flat=True)) == {one.slug, two.slug}

    request_deletion(first, actor=UserFactory(is_staff=True), via="api")
    wait_for(lambda: reconcile(first.pk) and not InferenceService.objects.filter(pk=first.pk).exists(),
             timeout=60, interval=0.3, message="the first service gone")
    assert handle.apps.list_namespaced_deployment(ns_one).items == []
    (left,) = handle.apps.list_namespaced_deployment(ns_two).items
    assert left.metadata.labels["controlplane.io/service-uid"] == str(second.uid)
