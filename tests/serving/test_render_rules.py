"""Renderer rules stated by DESIGN.md and issue 6, checked directly (expected values worked out by hand)."""

import dataclasses
import json

import pytest

from apps.catalog.engines import EngineSettings
from apps.serving.rendering import (
    AdapterSpec,
    AutoscalingSpec,
    PoolSpec,
    RenderError,
    render_service,
    service_endpoint,
    service_objects,
    supported_routing,
)
from apps.serving.rendering.output import to_json, to_yaml
from tests.serving.golden.specs import LLAMA_8B, SPECS, UID

HASH = "controlplane.io/pod-template-hash"


def spec(name="standard-vllm", **changes):
    """A golden spec with changes; without a gateway unless asked, so each kind/name is unique."""
    return dataclasses.replace(SPECS[name](), **{"has_gateway": False, **changes})


def find(objects, kind, name=None):
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def engine_container(objects, name="chat"):
    return find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_object_carries_the_recommended_labels(name):
    for obj in render_service(SPECS[name]()):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "controlplane"
        assert labels["controlplane.io/tenant"] == "acme"
        assert labels["app.kubernetes.io/name"] and labels["app.kubernetes.io/instance"]
        if obj["kind"] in ("Namespace", "ResourceQuota", "NetworkPolicy", "PersistentVolumeClaim"):
            # Shared by the tenant's services: never pruned with one of them.
            assert "controlplane.io/service-uid" not in labels
        else:
            assert labels["controlplane.io/service-uid"] == UID
            assert labels["app.kubernetes.io/component"] in ("engine", "prefill", "decode", "router")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rendering_is_deterministic_and_rollouts_never_drop_capacity(name):
    first, second = render_service(SPECS[name]()), render_service(SPECS[name]())
    assert first == second
    assert [o["kind"] for o in first][:2] == ["Namespace", "ResourceQuota"]
    for obj in first:
        if obj["kind"] == "Deployment":
            assert obj["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        if obj["kind"] == "LeaderWorkerSet":
            assert obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavailable"] == 0


def test_quota_is_the_tenants_gpu_quota_on_requested_nvidia_gpus():
    quota = find(render_service(spec(tenant_gpu_quota=12)), "ResourceQuota")
    assert quota["metadata"] == {**quota["metadata"], "name": "gpu-quota", "namespace": "tenant-acme"}
    assert quota["spec"] == {"hard": {"requests.nvidia.com/gpu": "12"}}


def test_standard_is_a_deployment_a_service_and_a_budget_when_round_robin():
    objects = render_service(spec(has_gateway=False))
    assert [o["kind"] for o in objects] == [
        "Namespace", "ResourceQuota", "NetworkPolicy", "NetworkPolicy", "PersistentVolumeClaim", "Deployment",
        "Service", "PodDisruptionBudget"]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "NetworkPolicy"] == [
        "tenant-egress", "tenant-isolation"]
    assert find(objects, "Service")["spec"]["selector"]["app.kubernetes.io/component"] == "engine"
    assert find(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("key,label,product,resource", [
    ("h100-sxm-80gb", "nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu"),
    ("a100-40gb", "nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu"),
    ("l4-24gb", "nvidia.com/gpu.product", "NVIDIA-L4", "nvidia.com/gpu"),
    ("mi300x-192gb", "amd.com/gpu.product-name", "AMD-Instinct-MI300X", "amd.com/gpu"),
])
def test_gpu_type_becomes_node_selector_toleration_and_limits(key, label, product, resource):
    objects = render_service(spec(pools=(PoolSpec("engine", 1, 1, 1, 2, key),)))
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {label: product}
    assert pod["tolerations"] == [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["containers"][0]["resources"]["limits"] == {resource: "2"}


def test_startup_budget_grows_with_the_model():
    # Llama 3.1 8B in bf16: 16.06 GB; 300 s warm-up + 2 × 16.06e9 / 500e6 = 364.24 s -> 37 probes of 10 s.
    small = engine_container(render_service(spec()))["startupProbe"]
    assert small["failureThreshold"] == 37 and small["periodSeconds"] == 10
    # 70B on one node: 141.2 GB -> 300 + 564.8 = 864.8 s -> 87 probes; the rollout deadline adds a
    # first download at 100 MB/s: 1412 + 865 = 2277 s.
    big_model = dataclasses.replace(LLAMA_8B, parameters=70_600_000_000)
    deployment = find(render_service(spec(model=big_model)), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureThreshold"] == 87
    assert deployment["spec"]["progressDeadlineSeconds"] == 2277


def test_changed_settings_roll_the_pods_and_a_new_generation_alone_does_not():
    base = find(render_service(spec()), "Deployment")["spec"]["template"]["metadata"]["annotations"][HASH]
    same = find(render_service(spec(generation=9)), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    changed = find(render_service(spec(settings=EngineSettings(max_model_len=4096))), "Deployment")
    assert same[HASH] == base
    assert changed["spec"]["template"]["metadata"]["annotations"][HASH] != base
    assert changed["metadata"]["annotations"][HASH] == changed["spec"]["template"]["metadata"]["annotations"][HASH]


def test_model_cache_is_filled_only_when_absent_and_gated_models_read_their_token_from_a_secret():
    objects = render_service(spec())
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    fetch = pod["initContainers"][0]
    script = fetch["command"][2]
    assert script.index('if [ -f "$dest/.complete" ]; then') < script.index("hf download")
    assert "hf download meta-llama/Llama-3.1-8B-Instruct --revision 0e9e39f2" in script
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in fetch["env"]
    claim = find(objects, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in pod["volumes"]
    ungated = find(render_service(spec(model_token_secret=None)), "Deployment")["spec"]["template"]["spec"]
    assert all(e["name"] != "HF_TOKEN" for e in ungated["initContainers"][0]["env"])


def test_models_already_on_a_pvc_are_mounted_not_downloaded():
    objects = render_service(SPECS["multi_node-vllm"]())
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    leader = find(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert "initContainers" not in leader
    assert {"name": "model-source", "persistentVolumeClaim": {"claimName": "shared-models", "readOnly": True}} \
        in leader["volumes"]
    args = leader["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/model-source/llama-3.1-70b-instruct"


def test_lora_adapters_are_fetched_and_passed_to_the_engine():
    objects = render_service(spec("standard-sglang", adapters=(AdapterSpec("tone", "s3://b/tone", 8),)))
    container = engine_container(objects)
    args = container["args"]
    assert args[args.index("--lora-paths") + 1] == "tone=/models/adapters/tone"
    assert "--enable-lora" in args
    inits = find(objects, "Deployment", "chat")["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["fetch-model", "fetch-adapter-tone", "select-weights"]
    assert "aws s3 sync s3://b/tone" in inits[1]["command"][2]


@pytest.mark.parametrize("routing,logic", [("session", "session"), ("prefix_aware", "prefixaware"),
                                           ("kv_aware", "kvaware")])
def test_vllm_routing_policies_render_the_production_stack_router(routing, logic, settings):
    settings.VLLM_ROUTER_IMAGE = "registry.example/mirror/lmstack-router:v9.9"
    objects = render_service(spec(routing=routing, has_gateway=False))
    router = find(objects, "Deployment", "chat-router")["spec"]["template"]["spec"]
    container = router["containers"][0]
    assert container["image"] == "registry.example/mirror/lmstack-router:v9.9"
    args = container["args"]
    assert args[args.index("--routing-logic") + 1] == logic
    assert args[args.index("--service-discovery") + 1] == "k8s"
    assert args[args.index("--k8s-port") + 1] == "8000"
    assert ("--session-key" in args) == (routing == "session")
    assert router["serviceAccountName"] == "chat-router"
    # The public Service moves to the router; the engines keep a Service of their own.
    assert find(objects, "Service", "chat")["spec"]["selector"]["app.kubernetes.io/component"] == "router"
    assert find(objects, "Service", "chat-engine")["spec"]["selector"]["app.kubernetes.io/component"] == "engine"
    role = find(objects, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_round_robin_needs_no_router():
    kinds = {o["kind"] for o in render_service(spec("standard-sglang", routing="round_robin"))}
    assert "ServiceAccount" not in kinds
    assert [o["metadata"]["name"] for o in render_service(spec("standard-sglang", routing="round_robin"))
            if o["kind"] == "Deployment"] == ["chat"]


def test_routers_refuse_policies_they_do_not_have():
    with pytest.raises(RenderError, match="SGLang router has no session"):
        render_service(spec("standard-sglang", routing="session"))
    with pytest.raises(RenderError, match="vLLM router has no cache_aware"):
        render_service(spec(routing="cache_aware"))
    assert supported_routing("vllm") == ("kv_aware", "prefix_aware", "round_robin", "session")
    assert supported_routing("sglang") == ("cache_aware", "kv_aware", "prefix_aware", "round_robin")


def test_vllm_pd_uses_nixl_producer_and_consumer_and_the_disaggregated_router():
    objects = render_service(SPECS["pd_disaggregated-vllm"]())
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        args = engine_container(objects, f"chat-{role}")["args"]
        config = json.loads(args[args.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": kv_role}
        labels = find(objects, "Deployment", f"chat-{role}")["spec"]["template"]["metadata"]["labels"]
        assert labels["model"] == f"chat-{role}"
    router = engine_container(objects, "chat-router")["args"]
    assert router[router.index("--routing-logic") + 1] == "disaggregated_prefill"
    assert router[router.index("--prefill-model-labels") + 1] == "chat-prefill"
    assert router[router.index("--decode-model-labels") + 1] == "chat-decode"


def test_sglang_pd_uses_disaggregation_mode_bootstrap_port_and_the_pd_router():
    objects = render_service(SPECS["pd_disaggregated-sglang"]())
    prefill = find(objects, "Deployment", "chat-prefill")["spec"]["template"]
    assert prefill["metadata"]["annotations"]["sglang.ai/bootstrap-port"] == "8998"
    args = prefill["spec"]["containers"][0]["args"]
    assert args[-4:] == ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "8998"]
    assert engine_container(objects, "chat-decode")["args"][-2:] == ["--disaggregation-mode", "decode"]
    router = engine_container(objects, "chat-router")
    assert router["command"] == ["python3", "-m", "sglang_router.launch_router"]
    assert "--pd-disaggregation" in router["args"]
    assert router["args"][router["args"].index("--prefill-selector") + 2] == "app.kubernetes.io/component=prefill"
    assert {p["port"] for p in find(objects, "Service", "chat-prefill")["spec"]["ports"]} == {30000, 8998}


def test_multi_node_group_spans_tensor_times_pipeline_parallel():
    lws = find(render_service(SPECS["multi_node-vllm"]()), "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    leader, worker = (group[t]["spec"]["containers"][0] for t in ("leaderTemplate", "workerTemplate"))
    gpus_per_node = int(leader["resources"]["limits"]["nvidia.com/gpu"])
    tp = int(leader["args"][leader["args"].index("--tensor-parallel-size") + 1])
    pp = int(leader["args"][leader["args"].index("--pipeline-parallel-size") + 1])
    assert group["size"] * gpus_per_node == tp * pp == 16
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    objects = render_service(SPECS["multi_node-sglang"]())
    assert find(objects, "Service", "chat-engine")["spec"]["selector"]["controlplane.io/role"] == "leader"


def test_serverless_may_sit_at_zero_and_is_annotated_for_the_autoscaler():
    objects = render_service(SPECS["serverless-sglang"]())
    deployment = find(objects, "Deployment", "chat")
    notes = deployment["metadata"]["annotations"]
    assert notes["controlplane.io/scale-to-zero"] == "true"
    assert notes["controlplane.io/autoscaler"] == "builtin"
    assert (notes["controlplane.io/min-replicas"], notes["controlplane.io/max-replicas"]) == ("0", "2")
    assert deployment["spec"]["replicas"] == 1  # the built-in autoscaler writes replicas through the spec
    zero = spec("serverless-sglang", pools=(PoolSpec("engine", 0, 0, 2, 1, "l4-24gb"),))
    assert find(render_service(zero), "Deployment", "chat")["spec"]["replicas"] == 0
    # Requests reach the service through its router, which holds them while the engine pool is at zero.
    assert find(objects, "Service", "chat")["spec"]["selector"]["app.kubernetes.io/component"] == "router"
    router = find(objects, "Deployment", "chat-router")["spec"]["template"]["metadata"]
    assert router["annotations"]["controlplane.io/activation-hold-seconds"] == "300"


def test_keda_and_hpa_own_replicas_and_none_renders_no_autoscaler():
    keda = render_service(SPECS["serverless-vllm"]())
    assert "replicas" not in find(keda, "Deployment", "chat")["spec"]
    scaled = find(keda, "ScaledObject")["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"], scaled["cooldownPeriod"]) == (0, 3, 600)
    waiting = next(t for t in scaled["triggers"] if "num_requests_waiting" in t["metadata"]["query"])
    assert waiting["metadata"]["threshold"] == "4" and waiting["metricType"] == "AverageValue"
    hpa = render_service(SPECS["pd_disaggregated-vllm"]())
    assert {o["metadata"]["name"] for o in hpa if o["kind"] == "HorizontalPodAutoscaler"} == {
        "chat-prefill", "chat-decode"}
    plain = render_service(spec(autoscaling=AutoscalingSpec()))
    assert not {"ScaledObject", "HorizontalPodAutoscaler"} & {o["kind"] for o in plain}
    assert find(plain, "Deployment")["spec"]["replicas"] == 2


def test_gateway_objects_only_when_the_cluster_has_one():
    with_gateway = render_service(spec(has_gateway=True))
    pool = find(with_gateway, "InferencePool")
    # Standard services put their engines in the pool; the endpoint picker chooses among them.
    assert pool["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"]["name"] == "chat-epp"
    epp = find(with_gateway, "Deployment", "chat-epp")["spec"]["template"]["spec"]["containers"][0]
    assert epp["args"][:4] == ["--pool-name", "chat", "--pool-namespace", "tenant-acme"]
    assert find(with_gateway, "Service", "chat-epp")["spec"]["ports"][0]["port"] == 9002
    assert "prefix-cache-scorer" in find(with_gateway, "ConfigMap", "chat-epp")["data"]["config.yaml"]
    route = find(with_gateway, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway"}]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "chat"}]
    pd = render_service(spec("pd_disaggregated-sglang", has_gateway=True))
    assert not {"InferencePool", "ConfigMap"} & {o["kind"] for o in pd}
    assert find(pd, "HTTPRoute")["spec"]["rules"][0]["backendRefs"] == [
        {"kind": "Service", "name": "chat", "port": 8000}]
    assert not {"InferencePool", "HTTPRoute", "ConfigMap"} & {o["kind"] for o in render_service(spec())}


def test_router_service_does_not_select_the_endpoint_picker():
    objects = render_service(spec(routing="prefix_aware", has_gateway=True))
    router_service = find(objects, "Service", "chat")["spec"]["selector"]
    epp_pod = find(objects, "Deployment", "chat-epp")["spec"]["template"]["metadata"]["labels"]
    assert not router_service.items() <= epp_pod.items()


def test_endpoint_and_service_objects():
    assert service_endpoint(spec()) == "http://chat.tenant-acme.svc.cluster.local:8000"
    assert service_endpoint(SPECS["standard-sglang"]()) == "http://chat.tenant-acme.svc.cluster.local:8000"
    assert service_endpoint(spec("standard-sglang", routing="round_robin")).endswith(":30000")
    objects = render_service(spec())
    owned = service_objects(objects)
    assert {o["kind"] for o in objects} - {o["kind"] for o in owned} == {
        "Namespace", "ResourceQuota", "NetworkPolicy", "PersistentVolumeClaim"}


def test_output_formats():
    objects = render_service(spec())
    assert to_yaml(objects).count("\n---\n") == len(objects) - 1
    assert "- |-\n          set -eu\n" in to_yaml(objects)  # scripts stay readable
    listed = json.loads(to_json(objects))
    assert listed["kind"] == "List" and listed["items"] == objects


def test_cached_weights_keep_the_source_directory_name():
    # The revision is not part of the directory; engines and kubesim recognise a model by this name.
    args = engine_container(render_service(spec()))["args"]
    assert args[args.index("--model") + 1] == "/models/Llama-3.1-8B-Instruct"
    sglang = engine_container(render_service(spec("standard-sglang", routing="round_robin")))["args"]
    assert sglang[sglang.index("--model-path") + 1] == "/models/qwen2.5-7b-instruct"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_service_objects_are_named_after_the_service_with_reserved_suffixes(name):
    from apps.serving.names import RESERVED_SUFFIXES

    allowed = {"chat", *(f"chat{suffix}" for suffix in RESERVED_SUFFIXES)}
    assert {o["metadata"]["name"] for o in service_objects(render_service(SPECS[name]()))} <= allowed


def test_yaml_export_quotes_strings_other_readers_take_for_numbers_so_kubectl_applies_it(make_cluster, tmp_path):
    """A pod-template hash such as `8746e32785045900` is a plain string to PyYAML but a float to kubectl's
    YAML reader, which then refused the whole file (`cannot unmarshal number into ... annotations`)."""
    import yaml

    awkward = {"hash": "8746e32785045900", "hex": "0x1F", "short": "y", "under": "1_000", "plain": "abc-12"}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "awkward", "namespace": "default", "annotations": awkward}, "data": awkward}
    text = to_yaml([configmap])
    assert yaml.safe_load(text) == configmap
    assert "plain: abc-12" in text  # strings nobody reads as anything else stay unquoted
    (tmp_path / "export.yaml").write_text(text)
    handle = make_cluster()
    handle.kubectl("apply", "--server-side", "--field-manager", "controlplane", "-f", str(tmp_path / "export.yaml"))
    stored = handle.core.read_namespaced_config_map("awkward", "default")
    assert stored.metadata.annotations == awkward and stored.data == awkward


def test_the_engine_uses_every_gpu_its_pod_holds():
    four = dataclasses.replace(SPECS["standard-vllm"]().pools[0], gpus_per_replica=4)
    unset = engine_container(render_service(spec(pools=(four,))))
    assert unset["args"][unset["args"].index("--tensor-parallel-size") + 1] == "4"
    assert "--data-parallel-size" not in unset["args"]
    tp1 = engine_container(render_service(spec(pools=(four,), settings=EngineSettings(tensor_parallel_size=1))))
    assert "--tensor-parallel-size" not in tp1["args"]
    assert tp1["args"][tp1["args"].index("--data-parallel-size") + 1] == "4"
    assert tp1["resources"]["limits"]["nvidia.com/gpu"] == "4"
