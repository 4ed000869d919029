"""The service page's queue card in headless Chromium at phone width: what waits at the gateways now (the replicas'
reports in Redis, summed per band and tenant), queue time p50/p95 and shed counts from the usage rows, following
the queue live; a window that is not offered is refused with the reason in place. axe-core clean."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.gateway.models import UsageRow
from gateway.door_report import QUEUE_PREFIX, publish
from tests.factories import InferenceServiceFactory
from tests.gateway.test_fairness import REDIS_URL
from tests.web.portal.page_checks import page_width, serious_axe_violations


def rows(service, tenant, now):
    def row(age_s: float, queued_ms: float | None, shed: str = "", status: int = 200):
        return UsageRow(at=now - timedelta(seconds=age_s), tenant=tenant, key_id=1, service_id=service.pk,
                        model="chat", status=status, duration_ms=50.0, queued_ms=queued_ms, shed=shed)

    made = [row(60 + n, 10.0 * (n + 1)) for n in range(20)]  # waited 10, 20, ... 200 ms and went on
    made += [row(30, None) for _ in range(5)]  # never waited: not in the queue's figures
    made += [row(90, 5000.0, "queue_timeout", 429) for _ in range(3)]  # waited out their time-to-live
    made += [row(10, None, "queue_full", 429)]
    made += [row(2 * 3600, 9999.0, "queue_full", 429)]  # two hours ago: only in the 24 h window
    UsageRow.objects.bulk_create(made)


@pytest.mark.browser
def test_the_queue_card_shows_waiting_queue_times_and_sheds_and_follows_the_queue(
        browser_page, live_server, viewer_a, tenant_a, settings):
    settings.GATEWAY_REDIS_URL = REDIS_URL
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready")
    rows(service, tenant_a, timezone.now())
    store = redis.Redis.from_url(REDIS_URL)
    band0, lowest = f"0|{tenant_a.pk}", f"-20|{tenant_a.pk}"
    publish(store, "replica-a", {service.pk: {band0: 2, lowest: 5}}, set())
    publish(store, "replica-b", {service.pk: {band0: 1}}, set())
    try:
        page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
        page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
        card = page.locator("#queue-card")
        waiting = card.locator("#queue-waiting tbody tr")
        # Both replicas' band-0 requests added up (2 + 1); the lowest band named by its names.
        expect(waiting).to_have_count(2)
        expect(waiting.nth(0)).to_have_text(f"0{tenant_a.name}3")
        expect(waiting.nth(1)).to_have_text(f"-20 (batch / best-effort){tenant_a.name}5")
        # 20 waits of 10..200 ms by nearest rank: p50 the 10th (100 ms), p95 the 19th (190 ms); the timed-out
        # requests' 5 s waits are not among them.
        expect(card.locator("#queue-queued")).to_have_text("20")
        expect(card.locator("#queue-p50")).to_have_text("100 ms")
        expect(card.locator("#queue-p95")).to_have_text("190 ms")
        expect(card.locator("#queue-shed")).to_have_text("queue_full 1, queue_timeout 3")
        assert serious_axe_violations(page, "#queue-card") == []
        width, wide = page_width(page)
        assert width <= 391 and wide == [], (width, wide)

        # The queue moves: replica b's request went on, replica a's lowest band drained to one. No reload.
        publish(store, "replica-a", {service.pk: {lowest: 1}}, {service.pk})
        publish(store, "replica-b", {}, {service.pk})
        expect(waiting).to_have_count(1, timeout=15_000)
        expect(waiting.nth(0)).to_have_text(f"-20 (batch / best-effort){tenant_a.name}1")

        # A longer window, chosen with the keyboard, takes in the shed request of two hours ago.
        page.locator("#queue-window").focus()
        page.keyboard.press("End")
        expect(card.locator("#queue-shed")).to_have_text("queue_full 2, queue_timeout 3")
    finally:
        store.delete(*[f"{QUEUE_PREFIX}{service.pk}:{r}" for r in ("replica-a", "replica-b")])


@pytest.mark.browser
def test_a_window_not_offered_is_refused_with_the_reason(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready")
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    url = reverse("web:service-queue-card", args=[service.tenant.slug, service.name])
    response = page.goto(live_server.url + url + "?window=7d")
    assert response.status == 400
    expect(page.get_by_role("alert")).to_have_text("window must be one of 15m, 1h, 24h, not '7d'.")
    expect(page.get_by_label("Window")).to_have_attribute("aria-invalid", "true")
    assert not page.locator("#queue-p50").count()  # no figures for a window that was not asked properly
