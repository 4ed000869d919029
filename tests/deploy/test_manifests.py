"""deploy/kubernetes: both overlays render, every object is valid Kubernetes 1.33 (strict), and the
manifests keep the promises of docs/install.md."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.deploy.manifests import OVERLAYS, containers, find, pod_specs, render


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_every_kind_the_install_needs(overlay):
    kinds = sorted({(o["kind"]) for o in render(overlay)})
    assert kinds == sorted(["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
                            "Service", "Deployment", "PodDisruptionBudget", "Job", "Ingress", "NetworkPolicy",
                            "HorizontalPodAutoscaler",
                            *(["Secret"] if overlay == "dev" else [])])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_kubernetes_1_33_in_strict_mode(overlay):
    for obj in render(overlay):
        kubernetes_validate.validate(obj, "1.33", strict=True)


def test_strict_validation_would_catch_a_misspelt_field():
    obj = find(render("production"), "Deployment", "controlplane-web")
    broken = {**obj, "spec": {**obj["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33", strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_namespaced_object_lives_in_the_controlplane_namespace(overlay):
    for obj in render(overlay):
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "controlplane", obj["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_and_limits_and_a_restricted_security_context(overlay):
    for where, spec in pod_specs(render(overlay)).items():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for container in containers(spec):
            resources = container["resources"]
            for part in ("requests", "limits"):
                assert set(resources[part]) == {"cpu", "memory"}, (where, container["name"], part)
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            # A read-only root needs a writable /tmp (gunicorn heartbeats, beat's schedule): an emptyDir.
            tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
            volume = next(v for v in spec["volumes"] if v["name"] == tmp["name"])
            assert "emptyDir" in volume, where


def test_production_web_runs_two_replicas_with_a_disruption_budget_selecting_its_pods():
    objects = render("production")
    web = find(objects, "Deployment", "controlplane-web")
    assert web["spec"]["replicas"] == 2
    assert web["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = find(objects, "PodDisruptionBudget", "controlplane-web")
    labels = web["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    assert web["spec"]["template"]["spec"]["containers"][0]["args"] == ["web"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_beat_is_a_single_replica_replaced_by_recreate(overlay):
    beat = find(render(overlay), "Deployment", "controlplane-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_web_probes_liveness_on_healthz_and_readiness_on_readyz(overlay):
    web = find(render(overlay), "Deployment", "controlplane-web")["spec"]["template"]["spec"]["containers"][0]
    assert web["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert web["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    service = find(render(overlay), "Service", "controlplane-web")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    ingress = find(render(overlay), "Ingress", "controlplane-web")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "controlplane-web", "port": {"name": "http"}}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_migrations_run_in_the_job_and_everything_else_waits_for_them(overlay):
    specs = pod_specs(render(overlay))
    assert [c["args"] for c in specs["Job/controlplane-migrate"]["containers"]] == [["migrate"]]
    for name in ("web", "worker", "beat"):
        init = specs[f"Deployment/controlplane-{name}"]["initContainers"]
        assert [c["args"][0] for c in init] == ["wait-for-migrations"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_workers_mount_the_service_account_token_and_it_is_bound_to_the_cluster_role(overlay):
    objects = render(overlay)
    specs = pod_specs(objects)
    mounted = sorted(k for k, s in specs.items() if s.get("automountServiceAccountToken", True))
    assert mounted == ["Deployment/controlplane-worker"]
    account = specs["Deployment/controlplane-worker"]["serviceAccountName"]
    binding = find(objects, "ClusterRoleBinding", "controlplane-workers")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "controlplane-workers"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "controlplane"}]


def test_dev_generates_its_secret_and_production_references_an_existing_one():
    dev, production = render("dev"), render("production")
    generated = [o for o in dev if o["kind"] == "Secret"]
    assert len(generated) == 1
    assert set(generated[0]["data"]) == {"SECRET_KEY", "FIELD_ENCRYPTION_KEY", "DATABASE_URL", "CELERY_BROKER_URL"}
    for spec in pod_specs(dev).values():
        assert {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v} == {
            generated[0]["metadata"]["name"]}
    for spec in pod_specs(production).values():
        assert {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v} == {"controlplane-secrets"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_secret_file_the_settings_name_is_mounted_from_the_secret(overlay):
    objects = render(overlay)
    settings = find(objects, "ConfigMap", "controlplane-settings")["data"]
    files = {k[: -len("_FILE")]: v for k, v in settings.items() if k.endswith("_FILE")}
    secret_keys = {"SECRET_KEY", "FIELD_ENCRYPTION_KEY", "DATABASE_URL", "CELERY_BROKER_URL"}
    assert set(files) == secret_keys
    for where, spec in pod_specs(objects).items():
        for container in containers(spec):
            mount = next(m for m in container["volumeMounts"] if "secret" in next(
                v for v in spec["volumes"] if v["name"] == m["name"]))
            assert {f"{mount['mountPath']}/{key}" for key in secret_keys} == set(files.values()), where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_web_and_gateway_ports_admit_traffic(overlay):
    policies = [o for o in render(overlay) if o["kind"] == "NetworkPolicy"]
    deny = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert len(deny) == 1 and "ingress" not in deny[0]["spec"]
    allow = [p for p in policies if p["spec"]["podSelector"]]
    assert sorted(p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in allow) == [
        "gateway", "web"]
    assert all(p["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}] for p in allow)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_probes_scales_on_cpu_and_keeps_one_replica_through_disruptions(overlay):
    objects = render(overlay)
    spec = pod_specs(objects)["Deployment/controlplane-gateway"]
    gateway = next(c for c in spec["containers"] if c["name"] == "gateway")
    assert gateway["args"][0] == "gateway" and "command" not in gateway  # the image's entrypoint, gateway role
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # It meters: the database URL is read from the mounted Secret's file, the one the other pods use.
    url_file = gateway["args"][gateway["args"].index("--database-url-file") + 1]
    mount = next(m for m in gateway["volumeMounts"] if url_file.startswith(m["mountPath"] + "/"))
    assert next(v for v in spec["volumes"] if v["name"] == mount["name"])["secret"]["secretName"]
    settings = find(objects, "ConfigMap", "controlplane-settings")["data"]
    assert settings["DATABASE_URL_FILE"] == url_file
    hpa = find(objects, "HorizontalPodAutoscaler", "controlplane-gateway")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "controlplane-gateway"
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    pdb = find(objects, "PodDisruptionBudget", "controlplane-gateway")
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
