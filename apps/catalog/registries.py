"""Which container registries a runtime image may come from: the platform list (`IMAGE_REGISTRIES`) plus a
tenant's additions (`TenantImageRegistry`). Pure functions over strings; settings import this module too.

An entry is a registry host, optionally with a path prefix (`docker.io/vllm`, `nvcr.io/nvidia`,
`registry.example:5000`). An image matches an entry when its normalized reference starts with the entry
at a path boundary, so `docker.io/vllm` admits `vllm/vllm-openai` but not `vllmx/...` or `ghcr.io/vllm/...`.
"""

from __future__ import annotations

import re

DEFAULT_REGISTRY = "docker.io"
_HOST = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?"
_PATH = r"[a-z0-9]+([._-][a-z0-9]+)*"
PREFIX_RE = re.compile(rf"{_HOST}(/{_PATH})*")
PREFIX_HELP = "A registry host with an optional path prefix, e.g. docker.io/vllm or registry.example:5000/ml."


def normalize_image(image: str) -> str:
    """`image` with its registry spelled out, by Docker's rule: the first component is a registry host only
    when it has a dot or a colon or is `localhost`; otherwise the image lives on Docker Hub."""
    image = image.strip().lower()
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    if image.startswith(f"{DEFAULT_REGISTRY}/"):
        return image
    return f"{DEFAULT_REGISTRY}/{image}" if rest else f"{DEFAULT_REGISTRY}/library/{image}"


def is_valid_prefix(prefix: str) -> bool:
    return bool(PREFIX_RE.fullmatch(prefix))


def parse_prefixes(raw: list[str], what: str) -> list[str]:
    """Strip and check a list of prefixes; raise ValueError naming the first bad one."""
    prefixes = [p.strip().lower().rstrip("/") for p in raw if p.strip()]
    for prefix in prefixes:
        if not is_valid_prefix(prefix):
            raise ValueError(f"{what}: {prefix!r} is not a registry prefix. {PREFIX_HELP}")
    return prefixes


def image_allowed(image: str, prefixes: list[str]) -> bool:
    """True when the image's normalized reference lies under one of the prefixes."""
    ref = normalize_image(image)
    return any(ref.startswith(normalize_prefix(p) + "/") for p in prefixes)


def normalize_prefix(prefix: str) -> str:
    """`vllm` alone would mean a Docker Hub namespace; spelled-out prefixes are kept as they are."""
    first = prefix.partition("/")[0]
    if "." in first or ":" in first or first == "localhost":
        return prefix
    return f"{DEFAULT_REGISTRY}/{prefix}"
