"""Source URIs of models and adapters: hf://org/name[@revision], s3://bucket/key, pvc://claim/path, local://path.

`local://path` names a directory of the node's local models folder (kubesim's cpu-real nodes: its `--models-dir`,
where `python -m kubesim tiny-model`/`tiny-adapter` write checkpoints); only vLLM reads it
(apps/serving/rendering/localsource.py)."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

_HF = re.compile(r"^hf://[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")
_S3 = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/\S+$")
_PVC = re.compile(r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?/\S*$")
LOCAL_PREFIX = "local://"
# Path segments of letters, digits, `.`, `_`, `-`, none starting with `.` (no `..`): it stays inside the folder.
_LOCAL = re.compile(r"^local://[\w-][\w.-]*(/[\w-][\w.-]*)*$")


def is_local(uri: str) -> bool:
    """Whether a source is a directory of the node's local models folder (`local://path`)."""
    return uri.startswith(LOCAL_PREFIX)


def validate_source_uri(value: str) -> None:
    if not any(pattern.match(value) for pattern in (_HF, _S3, _PVC, _LOCAL)):
        raise ValidationError(
            "%(value)s is not a supported source URI; use hf://org/name[@revision], s3://bucket/key, "
            "pvc://claim/path or local://path.",
            code="invalid_source_uri",
            params={"value": value},
        )
