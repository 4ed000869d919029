"""The tenant overview's GPU queue (nominal, used, borrowed and lent GPUs per type) and the fleet page's cohorts,
after a real admission pass on a cluster without Kueue. Figures worked by hand: alpha and bravo hold 2 L4 nominal
each in cluster west's cohort; alpha runs 4 single-L4 replicas, so it uses 4 and borrows bravo's idle 2."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from apps.serving.admission import admit_cluster
from tests.web.test_admission_browser import l4_service, shared_l4  # noqa: F401 (fixture)


def table_rows(html: str, table: str) -> list[list[str]]:
    """The body rows of the table(s) whose opening tag contains `table`, each as its cells' text."""
    rows = []
    for body in re.findall(rf"<table[^>]*{table}[^>]*>.*?<tbody>(.*?)</tbody>", html, re.S):
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S):
            rows.append([re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)])
    return rows


@pytest.fixture
def borrowing(shared_l4, tenant_a):  # noqa: F811 (the fixture imported above)
    l4_service(shared_l4, tenant_a, "batch-chat", "best-effort", replicas=4)
    admit_cluster(shared_l4)


def test_the_overview_shows_nominal_used_borrowed_and_lent_gpus_per_type(borrowing, login, viewer_a, member_b):
    alpha = login(viewer_a).get(reverse("web:overview", args=["alpha"])).content.decode()
    assert table_rows(alpha, 'id="queue-gpus"') == [["west · west", "L4", "2", "4", "2", "0"]]
    bravo = login(member_b).get(reverse("web:overview", args=["bravo"])).content.decode()
    assert table_rows(bravo, 'id="queue-gpus"') == [["west · west", "L4", "2", "0", "0", "2"]]


def test_the_fleet_page_shows_the_cohort_and_only_the_members_a_user_may_see(borrowing, login, staff, viewer_a):
    fleet = login(staff).get(reverse("web:home")).content.decode()
    assert "west · cohort west (2 queues)" in fleet
    assert table_rows(fleet, 'class="cohort"') == [["alpha", "L4", "2", "4", "2", "0"],
                                                   ["bravo", "L4", "2", "0", "0", "2"]]
    fleet = login(viewer_a).get(reverse("web:home")).content.decode()
    assert table_rows(fleet, 'class="cohort"') == [["alpha", "L4", "2", "4", "2", "0"]]
