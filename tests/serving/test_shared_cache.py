"""The cluster cache of platform-wide models on a real cluster: with `PLATFORM_MODEL_CACHE` set, every tenant
namespace's claim of a platform model binds by name to a PersistentVolume of its own on the same backing volume, pods
mount the model's directory of it, and the pod spec says which source it reads. Private models, and clusters without
the setting, keep a claim per namespace provisioned by the storage class."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from apps.serving.rendering import render_service
from apps.serving.rendering.modelagent import agent_objects
from apps.serving.sharedcache import parse_shared_cache
from tests.serving.golden.specs import SPECS

CLAIM = "model-llama-3-1-8b-f68c071b"  # the golden spec's cache claim (tests/serving/golden/standard-vllm.yaml)


def platform_spec(tenant: str = "acme"):
    spec = SPECS["standard-vllm"]()
    return replace(spec, tenant=tenant, namespace=f"tenant-{tenant}", model=replace(spec.model, platform_wide=True))


def kinds(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def engine_pod(objects):
    return next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]


@pytest.fixture
def nfs(settings):
    settings.PLATFORM_MODEL_CACHE = "nfs://nfs.example.internal/exports/models"


def test_every_tenant_namespace_binds_its_claim_to_the_same_nfs_export(nfs):
    volumes = {}
    for tenant in ("acme", "bravo"):
        objects = render_service(platform_spec(tenant))
        [volume], [claim] = kinds(objects, "PersistentVolume"), kinds(objects, "PersistentVolumeClaim")
        assert volume["metadata"]["name"] == f"tenant-{tenant}-{CLAIM}"
        assert volume["spec"] == {
            "capacity": {"storage": "18Gi"},  # 16.06 GB × 1.2 = 19.3 GB = 17.9 GiB, rounded up
            "accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": f"tenant-{tenant}",
                         "name": CLAIM},
            "nfs": {"server": "nfs.example.internal", "path": "/exports/models"}}
        assert claim["metadata"]["name"] == CLAIM and claim["metadata"]["namespace"] == f"tenant-{tenant}"
        assert claim["spec"]["volumeName"] == f"tenant-{tenant}-{CLAIM}" and claim["spec"]["storageClassName"] == ""
        # The volume comes before the claim that names it.
        assert objects.index(volume) < objects.index(claim)
        volumes[tenant] = volume["spec"]["nfs"]
    assert volumes["acme"] == volumes["bravo"]  # one backing volume: one download per cluster


def test_pods_mount_the_models_own_directory_and_say_which_source_they_read(nfs):
    template = engine_pod(render_service(platform_spec()))
    pod = template["spec"]
    mounts = [(c["name"], m) for c in [*pod["initContainers"], *pod["containers"]] for m in c["volumeMounts"]
              if m["name"] == "model-cache"]
    assert [name for name, _ in mounts] == ["fetch-model", "select-weights", "engine"]
    assert all(m["subPath"] == CLAIM for _, m in mounts)
    weights = json.loads(template["metadata"]["annotations"]["controlplane.io/weights"])
    assert weights["cluster_cache"] == f"platform/{CLAIM}"
    assert weights["cluster_cache_volume"] == f"nfs://nfs.example.internal/exports/models/{CLAIM}"
    select = next(c for c in pod["initContainers"] if c["name"] == "select-weights")
    assert f"echo 'weights: cluster cache (nfs://nfs.example.internal/exports/models/{CLAIM})'" in \
        select["command"][2]


def test_a_csi_volume_handle_is_shared_the_same_way(settings):
    settings.PLATFORM_MODEL_CACHE = "csi://efs.csi.aws.com/fs-0123456789abcdef0"
    [volume] = kinds(render_service(platform_spec()), "PersistentVolume")
    assert volume["spec"]["csi"] == {"driver": "efs.csi.aws.com", "volumeHandle": "fs-0123456789abcdef0"}
    assert "nfs" not in volume["spec"]


def test_a_private_model_keeps_its_own_claim_in_its_namespace(nfs):
    objects = render_service(SPECS["standard-vllm"]())  # the golden spec's model is the tenant's own
    assert kinds(objects, "PersistentVolume") == []
    [claim] = kinds(objects, "PersistentVolumeClaim")
    assert "volumeName" not in claim["spec"] and "storageClassName" not in claim["spec"]
    pod = engine_pod(objects)
    assert all("subPath" not in m for c in pod["spec"]["containers"] for m in c["volumeMounts"])
    assert "cluster_cache_volume" not in json.loads(pod["metadata"]["annotations"]["controlplane.io/weights"])


def test_without_the_setting_a_platform_model_claim_is_provisioned_per_namespace(settings):
    settings.PLATFORM_MODEL_CACHE = ""
    objects = render_service(platform_spec())
    assert kinds(objects, "PersistentVolume") == []
    assert "volumeName" not in kinds(objects, "PersistentVolumeClaim")[0]["spec"]


@pytest.mark.parametrize("value", ["smb://files/models", "nfs://", "nfs://server", "nfs://server/pa th", "csi://X/h",
                                   "/exports/models"])
def test_a_setting_that_names_no_volume_is_refused_with_its_name(value):
    with pytest.raises(ValueError, match=f"PLATFORM_MODEL_CACHE='{value}' is neither"):
        parse_shared_cache(value, "PLATFORM_MODEL_CACHE")


def test_the_model_agent_reads_the_same_volume_through_its_own_claim():
    objects = agent_objects("registry.example/controlplane:0.1.0", "nfs://nfs.example.internal/exports/models")
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                                            "PersistentVolumeClaim", "DaemonSet"]
    volume, claim, daemonset = objects[3], objects[4], objects[5]
    assert volume["metadata"]["name"] == "controlplane-model-agent-cluster-cache"
    assert volume["spec"]["nfs"] == {"server": "nfs.example.internal", "path": "/exports/models"}
    assert claim["spec"]["volumeName"] == "controlplane-model-agent-cluster-cache"
    pod = daemonset["spec"]["template"]["spec"]
    [agent] = pod["containers"]
    assert agent["command"] == ["python", "-m", "workers.modelagent"]
    assert agent["args"] == ["--plan", "/etc/model-agent/plan", "--cache", "/cluster-cache",
                             "--models", "/var/lib/controlplane/models"]
    assert {"name": "cluster-cache", "mountPath": "/cluster-cache", "readOnly": True} in agent["volumeMounts"]
    assert {"name": "cluster-cache", "persistentVolumeClaim": {"claimName": "model-agent-cluster-cache",
                                                               "readOnly": True}} in pod["volumes"]
    assert pod["serviceAccountName"] == "model-agent"
    with pytest.raises(ValueError, match="set PLATFORM_MODEL_CACHE"):
        agent_objects("registry.example/controlplane:0.1.0", "")


def test_the_manifest_command_prints_the_agents_objects_and_refuses_without_a_shared_cache(settings):
    from io import StringIO

    import yaml
    from django.core.management import CommandError, call_command

    settings.PLATFORM_MODEL_CACHE = "nfs://nfs.example.internal/exports/models"
    out = StringIO()
    call_command("model_agent_manifest", "--image", "registry.example.com/controlplane:0.1.0", stdout=out)
    docs = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ServiceAccount", "model-agent"), ("ClusterRole", "model-agent"), ("ClusterRoleBinding", "model-agent"),
        ("PersistentVolume", "controlplane-model-agent-cluster-cache"),
        ("PersistentVolumeClaim", "model-agent-cluster-cache"), ("DaemonSet", "model-agent")]
    assert docs[-1]["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/controlplane:0.1.0"
    with pytest.raises(CommandError, match="is not a pinned image"):
        call_command("model_agent_manifest", "--image", "controlplane:latest", stdout=StringIO())
    settings.PLATFORM_MODEL_CACHE = ""
    with pytest.raises(CommandError, match="set PLATFORM_MODEL_CACHE"):
        call_command("model_agent_manifest", "--image", "registry.example.com/controlplane:0.1.0", stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_the_reconciler_applies_each_tenants_volume_onto_the_shared_cache_in_kubesim(settings, make_cluster,
                                                                                      tenant_a, tenant_b):
    """Two tenants' services of one platform model on kubesim: each namespace's claim is bound by name to a volume of
    its own, both volumes on the same NFS export; the engine pods mount the model's directory of it."""
    from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory
    from workers.reconcile import reconcile

    settings.PLATFORM_MODEL_CACHE = "nfs://nfs.example.internal/exports/models"
    sim = make_cluster()
    cluster = ClusterFactory(api_url=sim.url, insecure_simulator=True)
    model = ModelFactory(name="llama-shared")  # platform-wide: no tenant
    services = [InferenceServiceFactory(tenant=t, name="chat", cluster=cluster, model=model)
                for t in (tenant_a, tenant_b)]
    for service in services:
        reconcile(service.pk)
    volumes = {v.metadata.name: v for v in sim.core.list_persistent_volume().items}
    claim = sim.core.list_namespaced_persistent_volume_claim("tenant-alpha").items[0].metadata.name
    assert sorted(volumes) == [f"tenant-alpha-{claim}", f"tenant-bravo-{claim}"]
    for tenant in ("alpha", "bravo"):
        volume = volumes[f"tenant-{tenant}-{claim}"]
        assert (volume.spec.nfs.server, volume.spec.nfs.path) == ("nfs.example.internal", "/exports/models")
        assert (volume.spec.claim_ref.namespace, volume.spec.claim_ref.name) == (f"tenant-{tenant}", claim)
        bound = sim.core.read_namespaced_persistent_volume_claim(claim, f"tenant-{tenant}")
        assert bound.spec.volume_name == f"tenant-{tenant}-{claim}"
    deployment = sim.apps.read_namespaced_deployment("chat", "tenant-bravo")
    engine = deployment.spec.template.spec.containers[0]
    assert [m.sub_path for m in engine.volume_mounts if m.name == "model-cache"] == [claim]
