"""The service page's "Changes to this service", the portal's Audit page and the admin's history render an
entry with the same words (apps/core/audit_display.py)."""

from __future__ import annotations

from django.urls import reverse

from tests.factories import ModelFactory


def test_the_service_page_audit_page_and_admin_history_show_the_same_words(login, api, owner_a, staff, service_a):
    other = ModelFactory(name="mistral-7b-words")
    response = api("owner_a").patch(f"/api/v1/services/{service_a.pk}/",
                                    {"model": other.pk, "engine_settings": {"max_model_len": 4096}}, format="json")
    assert response.status_code == 200, response.content
    line = f"<code>model</code>: <del>{service_a.model.name}</del> → <ins>mistral-7b-words</ins>"
    paths = "<code>engine_settings.max_model_len</code>"
    service_page = login(owner_a).get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    audit_page = login(owner_a).get(reverse("web:audit", args=["alpha"])).content.decode()
    admin_page = login(staff).get(reverse("admin:serving_inferenceservice_change", args=[service_a.pk])).content.decode()
    for html in (service_page, audit_page, admin_page):
        assert line in html
        assert paths in html
        assert f"<code>model</code>: <del>{service_a.model_id}</del>" not in html
