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
# The OCI distribution reference grammar (distribution/reference): a repository is an optional domain and
# path components joined by `/`, each component lowercase alphanumerics joined by one `.`, one or two `_`,
# or any run of `-`; so `..`, empty components and spaces never pass. A tag is a word character then up to
# 127 word characters, dots and dashes.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
REPOSITORY_RE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*")
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
REPOSITORY_HELP = "An image repository by the OCI reference grammar, e.g. docker.io/vllm/vllm-openai."
TAG_HELP = "A tag is letters, digits, `_`, `.` and `-` (up to 128, not starting with `.` or `-`), e.g. v0.8.5."


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


def is_valid_repository(image: str) -> bool:
    """True when `image` (without tag or digest) is a repository by the OCI reference grammar."""
    return bool(REPOSITORY_RE.fullmatch(image)) and len(image) <= 255


def is_valid_tag(tag: str) -> bool:
    return bool(TAG_RE.fullmatch(tag))


_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")


def parse_pinned_image(ref: str, what: str) -> str:
    """`ref` checked as a pinned image reference, `repository:tag` or `repository@sha256:…`; a missing tag
    or `latest` is refused, since a moving tag renders a different image into every namespace over time.
    Raises ValueError naming `what`."""
    ref = ref.strip()
    repository, at, digest = ref.partition("@")
    if at:
        pinned = bool(_DIGEST_RE.fullmatch(digest))
        repository = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
    else:
        last = repository.rsplit("/", 1)[-1]
        tag = last.rpartition(":")[2] if ":" in last else ""
        repository = repository[: len(repository) - len(tag) - 1] if tag else repository
        pinned = is_valid_tag(tag) and tag != "latest"
    if not (pinned and is_valid_repository(repository)):
        raise ValueError(f"{what}={ref!r} is not a pinned image: give repository:tag (not latest) or "
                         "repository@sha256:<digest>.")
    return ref


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
