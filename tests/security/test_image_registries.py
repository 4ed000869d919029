"""Runtimes may use images only from registries staff allow: the platform list plus a tenant's additions.

The rule lives in `Runtime.clean()`, so the API, the admin and the portal refuse the same images with the
same message, which names the registries that are allowed.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.catalog.models import Runtime, TenantImageRegistry
from apps.catalog.registries import parse_pinned_image
from apps.serving.rendering import render_service
from tests.factories import RuntimeFactory
from tests.serving.golden.specs import SPECS


@pytest.fixture(autouse=True)
def platform_registries(settings):
    settings.IMAGE_REGISTRIES = ["docker.io/vllm", "nvcr.io/nvidia"]


def runtime(tenant=None, image="vllm/vllm-openai", **kw):
    return Runtime(tenant=tenant, name="rt", engine="vllm", image=image, tag="v1", **kw)


def test_an_image_of_an_allowed_registry_is_admitted(tenant_a):
    runtime(tenant_a).full_clean()  # docker.io is implied for a bare "vllm/..." (Docker's rule)
    runtime(tenant_a, image="docker.io/vllm/vllm-openai").full_clean()
    runtime(tenant_a, image="nvcr.io/nvidia/tritonserver").full_clean()


@pytest.mark.parametrize("image", [
    "evil/miner",                       # docker.io/evil: another namespace of an allowed host
    "docker.io/vllmx/vllm-openai",      # a prefix of a path component is not the component
    "ghcr.io/vllm/vllm-openai",         # same path, other host
    "nvcr.io.attacker.com/nvidia/x",    # a host that only starts like an allowed one
    "localhost:5000/vllm/vllm-openai",
])
def test_an_image_of_another_registry_is_refused_naming_the_allowed_ones(tenant_a, image):
    with pytest.raises(ValidationError) as caught:
        runtime(tenant_a, image=image).full_clean()
    message = " ".join(caught.value.message_dict["image"])
    assert "docker.io/vllm" in message and "nvcr.io/nvidia" in message


def test_a_tenant_addition_admits_its_registry_for_that_tenant_only(tenant_a, tenant_b):
    TenantImageRegistry.objects.create(tenant=tenant_a, prefix="registry.alpha.example/ml")
    runtime(tenant_a, image="registry.alpha.example/ml/vllm").full_clean()
    with pytest.raises(ValidationError) as caught:
        runtime(tenant_b, image="registry.alpha.example/ml/vllm").full_clean()
    # Another tenant's addition is neither admitted nor named to bravo.
    assert "registry.alpha.example" not in " ".join(caught.value.message_dict["image"])
    with pytest.raises(ValidationError):  # platform-wide runtimes get the platform list only
        runtime(None, image="registry.alpha.example/ml/vllm").full_clean()


def test_the_api_refuses_an_image_with_400_naming_the_registries_and_saves_nothing(api, tenant_a, owner_a):
    body = {"tenant": "alpha", "name": "mine", "engine": "vllm", "image": "quay.io/someone/vllm", "tag": "v1",
            "supported_modes": ["standard"]}
    response = api("owner_a").post("/api/v1/runtimes/", body, format="json")
    assert response.status_code == 400
    assert "docker.io/vllm" in str(response.json())
    assert not Runtime.objects.filter(name="mine").exists()


def test_the_admin_refuses_the_same_image(client, staff):
    client.force_login(staff)
    response = client.post("/admin/catalog/runtime/add/", {
        "name": "adm", "engine": "vllm", "image": "quay.io/someone/vllm", "tag": "v1", "default_args": "[]",
        "supported_modes": "standard"})
    assert response.status_code == 200  # the form again, with the error
    assert "docker.io/vllm" in response.content.decode()
    assert not Runtime.objects.filter(name="adm").exists()


def test_a_registry_prefix_must_be_a_host_with_an_optional_path(tenant_a):
    with pytest.raises(ValidationError) as caught:
        TenantImageRegistry(tenant=tenant_a, prefix="https://registry.example/").full_clean()
    assert "prefix" in caught.value.message_dict


def test_the_default_platform_list_admits_the_engine_publishers_images(settings, tenant_a):
    import controlplane.settings as configured  # the value read at start, before this module's override

    settings.IMAGE_REGISTRIES = configured.IMAGE_REGISTRIES
    assert settings.IMAGE_REGISTRIES == ["docker.io/vllm", "docker.io/lmsysorg"]
    RuntimeFactory(image="vllm/vllm-openai").full_clean()
    RuntimeFactory(name="sg", engine="sglang", image="lmsysorg/sglang").full_clean()


@pytest.mark.parametrize("image", [
    "docker.io/vllm/../evil/x", "vllm/./vllm-openai", "docker.io/vllm//vllm-openai", "docker.io/vllm/vllm openai",
    "docker.io/vllm/VLLM-openai", "docker.io/vllm/-x", "docker.io/vllm/x.", "docker.io/vllm/x___y",
])
def test_an_image_outside_the_oci_reference_grammar_is_refused_even_under_an_allowed_registry(tenant_a, image):
    with pytest.raises(ValidationError) as caught:
        runtime(tenant_a, image=image).full_clean()

    assert "OCI reference grammar" in " ".join(caught.value.message_dict["image"])


@pytest.mark.parametrize("image", ["docker.io/vllm/vllm-openai", "vllm/vllm__openai.x", "vllm/a-----b",
                                   "registry.example:5000/vllm/x"])
def test_images_in_the_grammar_still_pass_the_grammar(tenant_a, settings, image):
    settings.IMAGE_REGISTRIES = ["docker.io/vllm", "registry.example:5000"]

    runtime(tenant_a, image=image).full_clean()


@pytest.mark.parametrize("tag", ["latest evil", "-rc1", ".hidden", "v1/../x", "a" * 129, "v1\n"])
def test_a_tag_that_is_not_a_tag_is_refused(tenant_a, tag):
    candidate = runtime(tenant_a)
    candidate.tag = tag

    with pytest.raises(ValidationError) as caught:
        candidate.full_clean()

    assert "is not an image tag" in " ".join(caught.value.message_dict["tag"])


@pytest.mark.parametrize("tag", ["v0.8.5", "latest", "_x", "1.2.3-cu124_b", "a" * 128])
def test_real_tags_are_tags(tenant_a, tag):
    candidate = runtime(tenant_a)
    candidate.tag = tag

    candidate.full_clean()


@pytest.mark.parametrize("ref", ["lmcache/lmstack-router:v0.1.9", "registry.example:5000/x/y:1.2",
                                 "registry.example:5000/x/y@sha256:" + "a" * 64,
                                 "x/y:v1@sha256:" + "0" * 64])
def test_a_pinned_image_is_a_tag_other_than_latest_or_a_digest(ref):
    assert parse_pinned_image(ref, "IMAGE") == ref


@pytest.mark.parametrize("ref", ["lmcache/lmstack-router", "lmcache/lmstack-router:latest",
                                 "registry.example:5000/x/y", "x/y@sha256:short", "x/../y:v1", "x/y:latest evil"])
def test_an_unpinned_image_is_refused_naming_the_setting(ref):
    with pytest.raises(ValueError, match="IMAGE="):
        parse_pinned_image(ref, "IMAGE")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_image_the_product_renders_is_one_a_runtime_or_a_setting_names(name, settings):
    the_spec = SPECS[name]()
    named = {the_spec.image_ref, settings.VLLM_ROUTER_IMAGE, settings.EPP_IMAGE, settings.MODEL_FETCH_IMAGE}

    images = {c["image"] for obj in render_service(the_spec) for c in _containers(obj)}

    assert images
    assert images <= named, images - named
    for image in images - {the_spec.image_ref}:
        parse_pinned_image(image, name)


def _containers(obj: dict) -> list[dict]:
    """Every container of every pod template in obj, wherever the kind keeps its templates (LeaderWorkerSet)."""
    found, stack = [], [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    found.extend(value)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found
