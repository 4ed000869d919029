"""A tiny real HTTP server for the telemetry tests, on a loopback port in a thread."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# app(path, query parameters) -> (status, content type, body)
App = Callable[[str, dict[str, str]], tuple[int, str, str]]


@contextmanager
def serving_app(app: App, headers_seen: list | None = None):
    """Serve GET requests with `app`; yields (base URL, list of request paths with their query strings).
    With `headers_seen`, each request's (path, headers) is appended to it too (headers read case-insensitively)."""
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            if headers_seen is not None:
                headers_seen.append((self.path, self.headers))
            parts = urllib.parse.urlsplit(self.path)
            status, content_type, text = app(parts.path, dict(urllib.parse.parse_qsl(parts.query)))
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def serving(bodies_by_path: dict[str, list[str]], content_type: str = "text/plain; version=0.0.4"):
    """Serve each path's bodies one per GET (the last one repeats), 404 elsewhere."""
    lock = threading.Lock()
    served: dict[str, int] = {}

    def app(path, _query):
        with lock:
            index = served.get(path, 0)
            served[path] = index + 1
        bodies = bodies_by_path.get(path)
        if not bodies:
            return 404, "text/plain", "not found"
        return 200, content_type, bodies[min(index, len(bodies) - 1)]

    with serving_app(app) as (base, requests):
        yield base, requests
