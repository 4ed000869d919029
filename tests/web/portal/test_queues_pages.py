"""The GPU quota page and the service form's priority class, through the test client: members read their queue,
only staff change it (403 otherwise, nothing changed), a refused input is a 422 with the model's words, and the
service form offers the classes up to the tenant's highest."""

from __future__ import annotations

import re

from django.urls import reverse

from apps.tenancy.models import TenantQueue


def form_data(queue, **values) -> dict:
    return {f"q{queue.pk}-{name}": value for name, value in values.items()}


def test_a_member_reads_the_queue_without_a_form(login, owner_a, tenant_a):
    body = login(owner_a).get(reverse("web:queues", args=["alpha"])).content.decode()
    assert "Queue on every cluster without its own queue" in body
    assert "Save queue" not in body and "<td>64</td>" in body


def test_an_owner_cannot_change_its_queue(login, owner_a, tenant_a):
    queue = TenantQueue.objects.get(tenant=tenant_a)
    response = login(owner_a).post(reverse("web:queue-edit", args=["alpha", queue.pk]),
                                   form_data(queue, nominal_any="1000", weight="1"))
    assert response.status_code == 403
    queue.refresh_from_db()
    assert queue.nominal == {"*": 64}


def test_a_borrowing_limit_above_what_the_cohort_lends_is_a_422_beside_its_input(login, staff, tenant_a, tenant_b):
    queue = TenantQueue.objects.get(tenant=tenant_a)
    response = login(staff).post(reverse("web:queue-edit", args=["alpha", queue.pk]),
                                 form_data(queue, nominal_any="64", borrowing_any="5", lending_any="0", weight="1"))
    assert response.status_code == 422
    body = response.content.decode()
    assert "*: a borrowing limit of 5 GPUs is above the 0 the rest of cohort of the cluster may lend." in body
    box = re.search(rf'<input[^>]*id="id_q{queue.pk}-borrowing_any"[^>]*>', body).group(0)
    assert 'aria-invalid="true"' in box
    queue.refresh_from_db()
    assert queue.borrowing_limit == {"*": 0}


def test_the_service_form_offers_the_classes_up_to_the_tenants_highest(login, operator_a, tenant_a, classes):
    tenant_a.max_priority_class = classes["standard"]
    tenant_a.default_priority_class = classes["best-effort"]
    tenant_a.save()
    body = login(operator_a).get(reverse("web:service-create", args=["alpha"])).content.decode()
    select = body.split('name="priority_class"')[1].split("</select>")[0]
    assert re.findall(r'<option value="([^"]*)"', select) == ["", "standard", "best-effort", "batch"]
    assert "Tenant default (best-effort)" in select
