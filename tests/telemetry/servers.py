"""A tiny real HTTP server for the telemetry tests: serves canned bodies in turn on a loopback port."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(bodies_by_path: dict[str, list[str]], content_type: str = "text/plain; version=0.0.4"):
    """Serve each path's bodies one per GET (the last one repeats); yields (base URL, list of requests)."""
    requests: list[str] = []
    lock = threading.Lock()
    served: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            with lock:
                requests.append(self.path)
                bodies = bodies_by_path.get(path)
                index = served.get(path, 0)
                served[path] = index + 1
            if not bodies:
                self.send_error(404)
                return
            body = bodies[min(index, len(bodies) - 1)].encode()
            self.send_response(200)
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


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
