"""`manage.py seed_gpu_prices`: example prices for the demo where none is set, valid GPU types, idempotent."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from apps.core.models import AuditEntry
from apps.serving.choices import GpuType
from apps.whatif.models import GpuPrice

pytestmark = pytest.mark.django_db


def test_example_prices_fill_only_what_is_unset_and_twice_changes_nothing():
    GpuPrice.objects.create(gpu_type="l4-24gb", usd_per_gpu_hour=Decimal("0.55"))  # an operator's own price
    call_command("seed_gpu_prices")
    call_command("seed_gpu_prices")
    prices = dict(GpuPrice.objects.values_list("gpu_type", "usd_per_gpu_hour"))
    assert prices["l4-24gb"] == Decimal("0.55") and prices["h100-sxm-80gb"] == Decimal("4.00")
    assert set(prices) <= set(GpuType.values) and len(prices) == 7
    for row in GpuPrice.objects.all():
        row.full_clean()
    assert AuditEntry.objects.filter(content_type__model="gpuprice", via="command").count() == 6
