"""The folder broker (kombu's filesystem transport) with a worker that stops promptly.

Celery's loop for transports without an event loop drains the broker in blocking slices of two seconds and
checks for a shutdown request only between them, and once more after it (one more full slice): an idle
worker took up to four seconds to begin its warm shutdown after SIGTERM, longer than `honcho`'s five-second
grace once the rest of the shutdown was added, so `make demo`'s Ctrl-C ended in SIGKILL. This transport
drains in slices of one polling interval and ends the wait as soon as the worker has been asked to stop.
Nothing else changes: messages are taken only in kombu's own poll, never interrupted.

Messages are also put atomically. kombu's channel creates the message file under its final name and then
writes it, and a consumer takes files without locking them: a consumer that moved a file between its creation
and its write read an empty message and died of a JSONDecodeError (seen in `make demo` once a second worker,
the what-if lab's, polled the folder). Here the message is written under a name no consumer looks at and
renamed into place, which is atomic on one filesystem.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps


def _worker_stopping() -> bool:
    from celery.worker import state  # set by the worker's SIGTERM/SIGINT/SIGQUIT handlers

    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: written as `<name>.tmp` (a name no queue matches), then renamed."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        data = dumps(payload).encode()
        try:
            with open(final + ".tmp", "wb") as f:
                f.write(data)
            os.replace(final + ".tmp", final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        started = monotonic()
        while True:
            try:
                return super().drain_events(connection, timeout=self.polling_interval)
            except TimeoutError:
                if _worker_stopping() or (timeout is not None and monotonic() - started >= timeout):
                    raise
