"""The default broker URL (the filesystem transport) connects without kombu's "No hostname" warning."""

from __future__ import annotations

import logging

from kombu import Connection

from controlplane.settings import DEFAULT_BROKER_URL


def test_the_default_broker_url_names_its_host_so_kombu_stays_quiet(caplog):
    with caplog.at_level(logging.WARNING, logger="kombu"):
        info = Connection(DEFAULT_BROKER_URL).info()
    assert info["transport"] == "filesystem"
    assert [r.getMessage() for r in caplog.records] == []
