"""The built-in admission plugins the simulated cluster enables, in kube-apiserver's order: mutating
plugins first, then validating ones, so quota counts the pod as it will be stored."""

from __future__ import annotations

from .quota import resource_quota
from .tolerations import extended_resource_toleration

PLUGINS = (extended_resource_toleration, resource_quota)
