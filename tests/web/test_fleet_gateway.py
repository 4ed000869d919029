"""The fleet page's *At the gateway* card: the last five minutes of request rows as the user may see them."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from apps.gateway.models import UsageRow


def row(tenant, seconds_ago: float, status: int = 200, added_ms: float | None = None) -> None:
    UsageRow.objects.create(at=timezone.now() - timedelta(seconds=seconds_ago), tenant=tenant, key_id=1,
                            service_id=1, model="chat", status=status, duration_ms=5.0, added_ms=added_ms)


def test_the_fleet_page_shows_rate_refusals_errors_and_added_latency_of_the_users_tenants(
        login, owner_a, tenant_a, tenant_b):
    for added in (1.0, 2.0, 10.0):
        row(tenant_a, 30, added_ms=added)
    row(tenant_a, 40, status=429)
    row(tenant_a, 50, status=503)
    row(tenant_a, 600, added_ms=500.0)  # ten minutes ago: not in the card
    row(tenant_b, 20, status=429, added_ms=900.0)  # another tenant's

    html = login(owner_a).get(reverse("web:home")).content.decode()
    card = html[html.index('id="at-the-door"'):]
    card = card[:card.index("</section>")]

    # 5 rows in 300 s; percentile_cont over 1, 2, 10: p50 2, p95 at rank 0.95 × 2 = 1.9, 2 + 0.9 × 8 = 9.2.
    assert '<dd id="door-rate">5 (0.02/s)</dd>' in card
    assert '<dd id="door-429">1</dd>' in card and '<dd id="door-5xx">1</dd>' in card
    assert '<dd id="door-added">2.00 / 9.20 ms</dd>' in card


def test_the_card_says_when_nothing_came_through(login, viewer_a):
    html = login(viewer_a).get(reverse("web:home")).content.decode()
    assert "No requests came through the inference gateway in the last 5 minutes." in html
