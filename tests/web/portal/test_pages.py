"""Every portal page renders for the roles that may open it, and shows write controls only to writers."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import issue_token
from tests.web.portal.conftest import page_urls

READ_ONLY_PAGES = ("service-create", "service-edit", "service-scale", "service-delete", "catalog-create",
                   "catalog-edit")


@pytest.mark.parametrize("actor", ["owner_a", "operator_a", "staff"])
def test_every_portal_page_opens_for_writers(request, login, actor, service_a, catalog_a):
    user = request.getfixturevalue(actor)
    token, _ = issue_token(user, name="t")
    client = login(user)
    for url in page_urls("alpha", "chat", token.pk, 0, catalog_a["private_model"].pk):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)


def test_viewer_opens_read_pages_and_gets_403_on_write_forms(login, viewer_a, service_a, catalog_a):
    client = login(viewer_a)
    for url in page_urls("alpha", "chat", 0, 0, catalog_a["private_model"].pk):
        response = client.get(url)
        write_form = any(f"/{part}" in url for part in ("new/", "edit/", "scale/", "delete/")) or url.endswith(
            f"/{catalog_a['private_model'].pk}/")
        assert response.status_code == (403 if write_form else 200), url


def test_viewer_sees_no_write_controls(login, viewer_a, service_a, catalog_a):
    client = login(viewer_a)
    pages = [reverse("web:overview", args=["alpha"]), reverse("web:tenant-services", args=["alpha"]),
             reverse("web:service", args=["alpha", "chat"]), reverse("web:tokens", args=["alpha"]),
             reverse("web:members", args=["alpha"]), reverse("web:catalog", args=["alpha", "models"])]
    for url in pages:
        html = client.get(url).content.decode()
        assert html.count('method="post"') == 1, url  # the log-out button only
        assert "New service" not in html and ">Edit<" not in html and "Revoke" not in html, url
