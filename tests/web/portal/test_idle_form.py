"""The service form's idle inputs: clean()'s refusals land beside the input they are about (the API's words),
and a valid choice is stored in the autoscaling policy."""

from __future__ import annotations

import re

from tests.web.portal.test_autoscaling_form import edit_post, tuned  # noqa: F401 (a fixture)


def test_sleep_on_a_service_that_never_goes_idle_is_refused_beside_the_input(api, login, owner_a, tuned):  # noqa: F811
    response = edit_post(login, owner_a, tuned["id"], when_idle="sleep")
    assert response.status_code == 422
    form = response.context["form"]
    assert form.errors["when_idle"] == [
        "when_idle applies to serverless services only (they are the ones that go idle)."]
    select = re.search(r'<select[^>]*name="when_idle"[^>]*>', response.content.decode()).group(0)
    assert 'aria-invalid="true"' in select
    assert "when_idle" not in api("owner_a").get(f"/api/v1/services/{tuned['id']}/").json()["autoscaling"]


def test_a_wake_objective_out_of_range_is_refused_beside_its_input(api, login, owner_a, tuned):  # noqa: F811
    response = edit_post(login, owner_a, tuned["id"], wake_objective_seconds="-1")
    assert response.context["form"].errors["wake_objective_seconds"] == [
        "wake_objective_seconds must be a number of seconds above 0 and at most 3600.",
        "wake_objective_seconds applies to serverless services only (they are the ones that go idle)."]
