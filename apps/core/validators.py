"""Validators shared by every app: names that become Kubernetes object names."""

from __future__ import annotations

import ipaddress

from django.core.validators import RegexValidator

from enginevocab.labels import NAME_RE as DNS1123_LABEL_RE

# Names become Kubernetes object names (and parts of them), so they follow RFC 1123 labels.
dns1123_label = RegexValidator(
    DNS1123_LABEL_RE,
    message="Use a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a "
    "letter or digit, at most 63 characters.",
    code="invalid_dns1123",
)


# Link-local networks, where clouds serve instance metadata and credentials (169.254.169.254, fd00:ec2::254 is
# not link-local but fe80::/10 is): never opened to tenant pods, whatever a cluster's egress allows.
LINK_LOCAL = ("169.254.0.0/16", "fe80::/10")


def link_local_inside(cidr: str) -> list[str]:
    """The link-local networks that `cidr` contains (to carve out of it as `except` blocks)."""
    network = ipaddress.ip_network(cidr, strict=False)
    return [local for local in LINK_LOCAL if _contains(network, ipaddress.ip_network(local))]


def is_link_local(cidr: str) -> bool:
    """Whether the network `cidr` lies wholly inside a link-local network."""
    network = ipaddress.ip_network(cidr, strict=False)
    return any(_contains(ipaddress.ip_network(local), network) for local in LINK_LOCAL)


def _contains(outer, inner) -> bool:
    return outer.version == inner.version and inner.subnet_of(outer)
