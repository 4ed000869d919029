"""The folder broker (kombu's filesystem transport) with a worker that stops promptly.

Celery's loop for transports without an event loop drains the broker in blocking slices of two seconds and
checks for a shutdown request only between them, and once more after it (one more full slice): an idle
worker took up to four seconds to begin its warm shutdown after SIGTERM, longer than `honcho`'s five-second
grace once the rest of the shutdown was added, so `make demo`'s Ctrl-C ended in SIGKILL. This transport
drains in slices of one polling interval and ends the wait as soon as the worker has been asked to stop.
Nothing else changes: messages are taken only in kombu's own poll, never interrupted.
"""

from __future__ import annotations

from time import monotonic

from kombu.transport import filesystem


def _worker_stopping() -> bool:
    from celery.worker import state  # set by the worker's SIGTERM/SIGINT/SIGQUIT handlers

    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


class Transport(filesystem.Transport):
    def drain_events(self, connection, timeout=None):
        started = monotonic()
        while True:
            try:
                return super().drain_events(connection, timeout=self.polling_interval)
            except TimeoutError:
                if _worker_stopping() or (timeout is not None and monotonic() - started >= timeout):
                    raise
