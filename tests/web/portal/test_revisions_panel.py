"""The service page's Revisions panel without a browser: rows and diffs in words, rollback and its refusals
inline (422, the portal's convention for a swap with an error), roles and tenants."""

from __future__ import annotations

from django.urls import reverse

from apps.serving.models import InferenceService, Revision

HX = {"HTTP_HX_REQUEST": "true"}


def panel_url(*suffix):
    return reverse("web:service-revisions", args=["alpha", "chat"]) + "".join(suffix)


def rollback_url(number):
    return reverse("web:revision-rollback", args=["alpha", "chat", number])


def test_the_service_page_lists_revisions_with_changes_in_words(login, revised, viewer_a):
    html = login(viewer_a).get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    assert 'id="revision-2"' in html and 'id="revision-1"' in html
    assert "<del>vllm-shared</del> → <ins>vllm-next</ins>" in html
    assert "Roll back to 1" not in html  # viewers read only


def test_diff_of_two_revisions_and_an_unknown_one(login, revised, viewer_a):
    client = login(viewer_a)
    html = client.get(panel_url("?from=2&to=1"), **HX).content.decode()
    assert "Revision 2 → 1" in html and "<del>vllm-next</del> → <ins>vllm-shared</ins>" in html
    response = client.get(panel_url("?from=7&to=1"), **HX)
    assert response.status_code == 422
    assert "Choose two revisions" in response.content.decode()
    # Revision numbers are ASCII digits: Arabic-Indic two and one name no revision (int() reads them as 2 and 1).
    response = client.get(panel_url("?from=\u0662&to=\u0661"), **HX)
    assert response.status_code == 422 and "Revision 2 → 1" not in response.content.decode()


def test_rollback_from_the_panel_and_again_is_refused_inline(login, revised, operator_a, catalog_a):
    client = login(operator_a)
    response = client.post(rollback_url(1), **HX)
    assert response.status_code == 200
    assert "Rolled back" in response.content.decode()
    latest = Revision.objects.filter(service=revised).order_by("-number").first()
    assert (latest.number, latest.restored_from, latest.audit_entry.via) == (3, 1, "portal")
    assert InferenceService.objects.get(pk=revised.pk).runtime == catalog_a["runtime"]
    response = client.post(rollback_url(1), **HX)
    assert response.status_code == 422
    assert 'role="alert">Revision 1 is what the service runs already.' in response.content.decode()
    assert client.post(rollback_url(9), **HX).status_code == 422
    assert Revision.objects.filter(service=revised).count() == 3


def test_viewers_cannot_roll_back_and_other_tenants_see_nothing(login, revised, viewer_a, member_b):
    assert login(viewer_a).post(rollback_url(1)).status_code == 403
    other = login(member_b)
    assert other.get(panel_url()).status_code == 404
    assert other.post(rollback_url(1)).status_code == 404
    assert Revision.objects.filter(service=revised).count() == 2
