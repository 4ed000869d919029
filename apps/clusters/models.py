"""Clusters (Kubernetes API endpoints with credentials encrypted at rest) and their observed GPU nodes."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models

from apps.core.access import RestrictedQuerySet, is_platform_staff, member_tenant_ids, restricted, staff_only
from apps.core.fields import EncryptedTextField
from apps.core.models import TimestampedModel
from apps.core.validators import LINK_LOCAL, dns1123_label, is_link_local


@dataclass(frozen=True)
class ClusterCredentials:
    """What a worker needs to build a Kubernetes client. Never log or serialize it."""

    api_url: str
    bearer_token: str
    kubeconfig: str
    ca_bundle: str
    verify_tls: bool
    # In-cluster: the directory holding the pod's ServiceAccount `token` and `ca.crt` ("" otherwise).
    service_account_dir: str = ""

    def __repr__(self) -> str:  # keeps the secrets out of tracebacks and logs
        return (
            f"ClusterCredentials(api_url={self.api_url!r}, verify_tls={self.verify_tls}, secrets=<redacted>)"
        )


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


class NodeModelVolume(models.TextChoices):
    """How an engine pod reaches the model agent's copy of its weights on its node (docs/cold-start.md)."""

    NONE = "none", "none: no node-local copies; pods read the cluster cache"
    HOST_PATH = "hostPath", "hostPath: the agent's directory on the node, read-only (needs Pod Security privileged)"
    CSI = "csi", "csi: an inline volume of a node plugin for models.controlplane.io (none ships; install one)"


class HttpsURLField(models.URLField):
    """A URLField whose form field assumes https for scheme-less input (Django 6's default, today)."""

    def formfield(self, **kwargs):
        return super().formfield(**{"assume_scheme": "https", **kwargs})


class ClusterQuerySet(RestrictedQuerySet):
    """Clusters are platform infrastructure: staff only. Which ones a tenant may deploy to is a separate
    question, `usable_by_tenant`, asked by validation, never by a listing."""

    rule = staff_only("platform infrastructure; tenants name a cluster only when they deploy")

    def usable_by_tenant(self, tenant_id: int | None) -> ClusterQuerySet:
        """The clusters staff let this tenant deploy to: open to all, or listing the tenant."""
        return self.filter(models.Q(open_to_all_tenants=True) | models.Q(tenants=tenant_id)).distinct()

    def usable_by_user(self, user) -> ClusterQuerySet:
        """Every cluster for staff; otherwise those some tenant of the user may deploy to, so that any other
        name, existing or not, is looked up and refused the same way."""
        if is_platform_staff(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()  # the schema view builds serializers for the anonymous
        return self.filter(models.Q(open_to_all_tenants=True)
                           | models.Q(tenants__in=member_tenant_ids(user))).distinct()


def unavailable_cluster_message(name) -> str:
    """One answer for a cluster that does not exist and one the tenant may not use, so that a tenant
    cannot learn the names of clusters it may not use."""
    return f"No cluster named {name!s} is available to this tenant."


class Cluster(TimestampedModel):
    """A Kubernetes API endpoint. Credentials are write-only outside `credentials()`."""

    name = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    description = models.TextField(blank=True)
    api_url = HttpsURLField(max_length=500, help_text="Kubernetes API server URL.")
    bearer_token = EncryptedTextField(blank=True)
    kubeconfig = EncryptedTextField(blank=True, help_text="A kubeconfig document (YAML), used when set.")
    ca_bundle = EncryptedTextField(blank=True, help_text="PEM CA bundle for the API server certificate.")
    in_cluster = models.BooleanField(
        default=False,
        help_text="Use the worker pod's own ServiceAccount token and CA (the cluster the control plane runs in); "
        "the token is re-read when Kubernetes rotates it. Instead of a bearer token or kubeconfig.",
    )
    insecure_simulator = models.BooleanField(
        default=False,
        help_text="The local kubesim: TLS is not verified and no credentials are required. "
        "Never for real clusters.",
    )
    has_gateway = models.BooleanField(
        default=False, help_text="Gateway API inference extension is installed."
    )
    kueue_installed = models.BooleanField(
        default=False,
        help_text="Kueue is installed: the reconciler renders tenant queues as Kueue objects and reads admission "
        "from its Workloads. Otherwise the control plane admits replicas itself, by the same policy.",
    )
    prometheus_url = HttpsURLField(
        max_length=500, blank=True,
        help_text="A Prometheus server that already scrapes this cluster's engines (labels namespace and pod). "
        "When set, engine telemetry is read from it with PromQL instead of through the pod proxy.",
    )
    api_server_cidrs = ArrayField(
        models.CharField(max_length=43), default=list, blank=True,
        help_text="Where the API server's proxy traffic to pods comes from (CIDRs, comma-separated); the tenant "
        "NetworkPolicy admits it. Empty: the addresses of the default/kubernetes Endpoints.",
    )
    model_egress_cidrs = ArrayField(
        models.CharField(max_length=43), default=list, blank=True,
        help_text="Where tenant pods may connect outside their namespace to fetch models (CIDRs of the model "
        "sources or of an egress proxy, comma-separated). Link-local addresses (cloud metadata) stay blocked.",
    )
    node_model_volume = models.CharField(
        max_length=8, choices=NodeModelVolume.choices, default=NodeModelVolume.NONE,
        help_text="How engine pods reach the model agent's node-local copy of their weights: none (no model agent: "
        "the cluster cache only), hostPath (the agent's directory; tenant namespaces get Pod Security "
        "privileged) or csi (a node plugin for the driver models.controlplane.io, which you install).",
    )
    open_to_all_tenants = models.BooleanField(
        default=False, help_text="Every tenant may deploy here. Otherwise only the tenants listed below may."
    )
    tenants = models.ManyToManyField(
        "tenancy.Tenant", blank=True, related_name="clusters",
        help_text="The tenants that may deploy services to this cluster.",
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = {}
        if not (self.insecure_simulator or self.in_cluster or self.bearer_token or self.kubeconfig):
            errors["bearer_token"] = [
                "Give a bearer token or a kubeconfig, or use in-cluster credentials "
                "(or mark the cluster as the local simulator)."
            ]
        if self.in_cluster and (self.bearer_token or self.kubeconfig):
            errors["in_cluster"] = [
                "In-cluster credentials replace the bearer token and kubeconfig: clear those or untick this."
            ]
        if self.ca_bundle and "BEGIN CERTIFICATE" not in self.ca_bundle:
            errors["ca_bundle"] = ["The CA bundle must be PEM (-----BEGIN CERTIFICATE-----)."]
        if self.api_url and self.api_url.startswith("http://") and not self.insecure_simulator:
            errors["api_url"] = [
                "Use https:// for real clusters; plain http is only for the local simulator."
            ]
        bad = [c for c in self.api_server_cidrs or [] if not _is_cidr(c)]
        if bad:
            errors["api_server_cidrs"] = [f"Not a CIDR: {', '.join(bad)} (e.g. 10.0.0.0/24 or 10.0.0.5/32)."]
        bad = [c for c in self.model_egress_cidrs or [] if not _is_cidr(c)]
        if bad:
            errors["model_egress_cidrs"] = [f"Not a CIDR: {', '.join(bad)} (e.g. 10.0.0.0/24 or 0.0.0.0/0)."]
        elif any(is_link_local(c) for c in self.model_egress_cidrs or []):
            # A block that contains link-local (0.0.0.0/0) is fine: the policy carves it out.
            errors["model_egress_cidrs"] = [f"{', '.join(LINK_LOCAL)} (cloud metadata) are never opened to "
                                            "tenant pods; list the model sources' own addresses."]
        if errors:
            raise ValidationError(errors)

    @property
    def reads_node_copies(self) -> bool:
        """Whether engine pods here mount the model agent's node-local copies (node model volume hostPath or csi):
        without it no model cache, prefetch plan or agent plan is offered."""
        return self.node_model_volume != NodeModelVolume.NONE

    def credentials(self) -> ClusterCredentials:
        """Decrypted credentials for the workers that talk to this cluster."""
        return ClusterCredentials(
            api_url=self.api_url,
            bearer_token=self.bearer_token or "",
            kubeconfig=self.kubeconfig or "",
            ca_bundle=self.ca_bundle or "",
            verify_tls=not self.insecure_simulator,
            service_account_dir=settings.KUBERNETES_SERVICE_ACCOUNT_DIR if self.in_cluster else "",
        )



class GpuNode(models.Model):
    """A GPU node as last observed in a cluster (written by the inventory worker, not by people)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_nodes")
    name = models.CharField(max_length=253)
    gpu_product = models.CharField(max_length=100, blank=True, help_text="nvidia.com/gpu.product label.")
    gpu_count = models.PositiveIntegerField(default=0)
    allocatable = models.PositiveIntegerField(default=0)
    allocated = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    ready = models.BooleanField(default=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    agent_events = models.JSONField(
        default=list, blank=True,
        help_text="The model agent's latest Events on the node, newest first: {reason, message, type, time, count}.")

    # Nodes are observed infrastructure like their cluster; they have no tenant of their own to filter on.
    objects = restricted(staff_only("observed platform infrastructure, the nodes of a staff-only cluster"))

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="clusters_gpunode_unique")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"

    @property
    def free(self) -> int:
        return max(self.allocatable - self.allocated, 0)
