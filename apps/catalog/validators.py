"""Source URIs of models and adapters: hf://org/name[@revision], s3://bucket/key, pvc://claim/path."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

_HF = re.compile(r"^hf://[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")
_S3 = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/\S+$")
_PVC = re.compile(r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?/\S*$")


def validate_source_uri(value: str) -> None:
    if not any(pattern.match(value) for pattern in (_HF, _S3, _PVC)):
        raise ValidationError(
            "%(value)s is not a supported source URI; use hf://org/name[@revision], s3://bucket/key "
            "or pvc://claim/path.",
            code="invalid_source_uri",
            params={"value": value},
        )
