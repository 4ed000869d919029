"""The tenant namespace rule: `tenant-<slug>`, always a valid DNS label, unique per tenant."""

from __future__ import annotations

import re

from apps.serving.names import tenant_namespace

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def test_a_short_slug_keeps_its_plain_namespace():
    assert tenant_namespace("acme") == "tenant-acme"
    assert tenant_namespace("a" * 56) == "tenant-" + "a" * 56  # exactly 63 characters: no change


def test_long_slugs_that_share_a_head_get_distinct_valid_namespaces():
    # Slugs may be 63 characters; with the 7-character prefix they no longer fit a DNS label.
    one, two = "team-" + "x" * 57 + "1", "team-" + "x" * 57 + "2"
    first, second = tenant_namespace(one), tenant_namespace(two)
    assert first != second
    for namespace in (first, second):
        assert len(namespace) <= 63 and DNS_LABEL.fullmatch(namespace)
        assert namespace.startswith("tenant-team-xxxx")
    assert tenant_namespace(one) == first  # stable across calls (the delete path finds the same namespace)


def test_a_truncation_never_ends_in_a_dash_before_the_hash():
    namespace = tenant_namespace("a" * 46 + "-" + "b" * 16)
    assert "--" not in namespace and DNS_LABEL.fullmatch(namespace)
