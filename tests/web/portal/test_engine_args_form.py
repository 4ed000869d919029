"""Extra engine arguments in the portal's service form: refused beside the field with the API's reason."""

from __future__ import annotations

from django.urls import reverse

from apps.serving.models import InferenceService
from tests.web.portal.forms import service_post


def test_a_refused_argument_is_shown_at_the_field_and_nothing_is_saved(client, operator_a, cluster, catalog_a):
    client.force_login(operator_a)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"],
                        extra_args='--compilation-config\n{"inductor_passes": {"x": "os.system"}}')
    response = client.post(reverse("web:service-create", args=["alpha"]), data)
    assert response.status_code == 422
    [error] = response.context["form"].errors["extra_args"]
    assert "--compilation-config may not set 'inductor_passes'" in error
    assert not InferenceService.objects.filter(name="new-chat").exists()
