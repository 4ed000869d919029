"""The rollout inputs of the portal's service form: a canary saved as `rollout` and shown again on edit, and
the model's refusals shown beside the input they are about (headless Chromium for the refusal)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from tests.web.portal.forms import service_post
from tests.web.portal.page_checks import start_service_form


def test_the_form_saves_a_canary_and_shows_it_again(client, operator_a, cluster, catalog_a):
    client.force_login(operator_a)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], rollout_strategy="canary",
                        canary_weights="5, 25 50,100", canary_step_seconds="120", canary_tolerance="0.3")
    response = client.post(reverse("web:service-create", args=["alpha"]), data)
    assert response.status_code == 302, response.content[:800]
    service = InferenceService.objects.get(tenant__slug="alpha", name="new-chat")
    assert service.rollout == {"strategy": "canary", "tolerance": 0.3, "steps": [
        {"weight": 5, "min_duration_seconds": 120}, {"weight": 25, "min_duration_seconds": 120},
        {"weight": 50, "min_duration_seconds": 120}, {"weight": 100}]}
    form = client.get(reverse("web:service-edit", args=["alpha", "new-chat"])).context["form"]
    assert [form[n].value() for n in ("rollout_strategy", "canary_weights", "canary_step_seconds",
                                      "canary_tolerance")] == ["canary", "5, 25, 50, 100", 120, 0.3]


def test_a_post_without_a_strategy_rolls(client, operator_a, cluster, catalog_a):
    client.force_login(operator_a)
    client.post(reverse("web:service-create", args=["alpha"]),
                service_post(model=catalog_a["model"], runtime=catalog_a["runtime"]))
    assert InferenceService.objects.get(name="new-chat").rollout == {"strategy": "rolling"}


@pytest.mark.parametrize(("fields", "input_name", "words"), [
    ({"canary_weights": "5, 50"}, "canary_weights", "the last step must send 100 % to the new revision"),
    ({"canary_weights": "5, 100", "canary_step_seconds": "10"}, "canary_step_seconds",
     "step 1's must be a whole number of seconds from 60 to 86400; got 10"),
    ({"canary_weights": "5, 100", "canary_tolerance": "2"}, "canary_tolerance",
     "tolerance must be a number above 0 and at most 1"),
    ({"canary_weights": "five"}, "canary_weights", "Write whole percentages separated by commas"),
    # Arabic-Indic 50 and 100, which int() reads as 50 and 100: percentages are written in ASCII digits.
    ({"canary_weights": "\u0665\u0660, \u0661\u0660\u0660"}, "canary_weights",
     "Write whole percentages separated by commas"),
])
def test_refusals_stand_beside_their_input_and_save_nothing(client, operator_a, cluster, catalog_a, fields,
                                                             input_name, words):
    client.force_login(operator_a)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], rollout_strategy="canary", **fields)
    response = client.post(reverse("web:service-create", args=["alpha"]), data)
    assert response.status_code == 422
    assert any(words in e for e in response.context["form"].errors[input_name]), response.context["form"].errors
    assert not InferenceService.objects.filter(name="new-chat").exists()


@pytest.mark.browser
def test_falling_canary_weights_show_why_at_the_field(browser_page, live_server, operator_a, cluster, catalog_a):
    page = browser_page(operator_a)
    start_service_form(page, live_server.url, "canaried")
    page.get_by_label("Rollout strategy").select_option(label="Canary (weighted steps, each judged)")
    page.get_by_label("Canary steps (% of requests)").fill("25, 5, 100")
    page.get_by_role("button", name="Create service").click()

    weights = page.get_by_label("Canary steps (% of requests)")
    expect(weights).to_be_focused()
    expect(weights).to_have_attribute("aria-invalid", "true")
    error = page.locator(".field", has=weights).locator(".errorlist")
    expect(error).to_contain_text("weights must rise from step to step; got 25, 5, 100")
    assert not InferenceService.objects.filter(name="canaried").exists()
