"""The test database after a transactional test's flush holds what the migrations seeded (tests/conftest.py
`seeded_rows_outlive_a_flush`): under pytest-xdist a worker runs plain database tests after transactional ones
(the real-engine group is scheduled first), and those tests read the platform's priority classes."""

import pytest
from django.core.management import call_command

from apps.tenancy.choices import DEFAULT_PRIORITY_CLASSES
from apps.tenancy.models import PriorityClass


@pytest.mark.django_db(transaction=True)
def test_a_flush_puts_back_the_priority_classes_the_migration_seeds():
    PriorityClass.objects.create(name="made-by-a-test", value=5)
    call_command("flush", verbosity=0, interactive=False)  # what a transactional test's teardown runs
    assert sorted(PriorityClass.objects.values_list("name", "value")) == sorted(
        [("batch", -10), ("best-effort", 0), ("production", 1000), ("standard", 100)])
    assert len(DEFAULT_PRIORITY_CLASSES) == 4
