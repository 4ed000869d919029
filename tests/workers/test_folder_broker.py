"""The folder broker puts each message atomically: a consumer never sees a message file before all of it is
written. (kombu's own channel creates the file under its final name, then writes it; a second worker polling
the folder took such a file in `make demo`, read an empty message and died.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kombu import Connection

from controlplane import broker


def test_a_message_appears_under_its_queue_name_only_once_it_is_whole(tmp_path, monkeypatch):
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    body = {"task": "x" * 20_000}
    seen = []
    rename = os.replace

    def watched_rename(src, dst):
        # The moment before the message becomes visible: what a consumer listing the folder would find.
        seen.append(([n for n in os.listdir(tmp_path) if n.endswith(".q.msg")], json.loads(Path(src).read_text())))
        return rename(src, dst)

    monkeypatch.setattr(broker.os, "replace", watched_rename)
    with Connection(transport=broker.Transport, transport_options=options) as conn:
        conn.default_channel._put("q", body)
        assert seen == [([], body)]  # nothing visible to the queue's consumers, and the file already whole
        assert conn.default_channel._get("q") == body
    assert os.listdir(tmp_path) == []
