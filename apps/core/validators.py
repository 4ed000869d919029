"""Validators shared by every app: names that become Kubernetes object names."""

from __future__ import annotations

import re

from django.core.validators import RegexValidator

DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Names become Kubernetes object names (and parts of them), so they follow RFC 1123 labels.
dns1123_label = RegexValidator(
    DNS1123_LABEL_RE,
    message="Use a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a "
    "letter or digit, at most 63 characters.",
    code="invalid_dns1123",
)
