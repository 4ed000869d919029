"""Fetch an engine's `/metrics` over plain HTTP, for `manage.py engine_stats` and direct URLs.

The scraper worker reads pods through the Kubernetes API server's pod proxy instead and hands the text
to `exposition.parse_snapshot`; this module never talks to Kubernetes.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request

from .exposition import Snapshot, parse_snapshot

# Engines answer with the Prometheus text format; OpenMetrics is not asked for because the parser
# used downstream reads the classic text format.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
MAX_BYTES = 32 * 1024 * 1024


class ScrapeError(Exception):
    """The metrics could not be fetched (unreachable, timeout, HTTP error, not HTTP/HTTPS)."""


def metrics_url(url: str) -> str:
    """The `/metrics` URL of an engine given its base URL or its metrics URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ScrapeError(f"{url!r} is not an http(s) URL")
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path = f"{path}/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def fetch_metrics(url: str, timeout: float = 5.0) -> str:
    """GET `url` and return the body as text; raise ScrapeError on any failure."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ScrapeError(f"{url!r} is not an http(s) URL")
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})  # noqa: S310 (scheme checked above)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            body = response.read(MAX_BYTES + 1)
            charset = response.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"{url}: {reason}") from exc
    if len(body) > MAX_BYTES:
        raise ScrapeError(f"{url}: response larger than {MAX_BYTES} bytes")
    return body.decode(charset, errors="replace")


def scrape(url: str, timeout: float = 5.0) -> Snapshot:
    """Fetch and parse one engine's metrics; the snapshot is timed when the response arrived."""
    text = fetch_metrics(url, timeout)
    return parse_snapshot(text, scraped_at=time.time())
