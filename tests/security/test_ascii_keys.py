"""Primary keys are ASCII digits only: Python's int() reads any Unicode digit, so without a check
`"1١"` (a one and an Arabic-Indic one) would resolve to object 11, in a URL and in a body."""

from __future__ import annotations

import pytest

from apps.catalog.models import Model
from apps.tenancy.models import ApiToken
from tests.factories import ModelFactory, issue_token


@pytest.fixture
def eleventh_token(owner_a):
    """An owner's token whose primary key is 11."""
    token, _ = issue_token(owner_a, name="first")
    ApiToken.objects.filter(pk=token.pk).update(id=11)
    return ApiToken.objects.get(pk=11)


@pytest.mark.parametrize("written", ["1\u0661", "\u0661\u0661", "\uff11\uff11", "11\u00a0"])
def test_a_url_key_in_other_digits_is_a_404(api, eleventh_token, written):
    client = api("owner_a")
    assert client.get("/api/v1/tokens/11/").status_code == 200

    response = client.get(f"/api/v1/tokens/{written}/")

    assert response.status_code == 404


@pytest.mark.parametrize("written", ["1\u0661", "\uff11\uff11"])
def test_a_body_key_in_other_digits_is_refused_naming_the_field(api, owner_a, tenant_a, written):
    # A model 11 exists, so before the check the key resolved and the error was elsewhere.
    Model.objects.filter(pk=ModelFactory(name="eleven").pk).update(id=11)

    response = api("owner_a").post("/api/v1/services/", {
        "tenant": "alpha", "name": "chat", "cluster": "nowhere", "model": written, "runtime": 1,
        "pools": [],
    }, format="json")

    assert response.status_code == 400
    assert "model" in response.json()
    assert "digits" in str(response.json()["model"])
