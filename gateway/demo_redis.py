"""`python -m gateway.demo_redis`: the Redis `make demo`'s gateway shares its limits in. GATEWAY_REDIS_URL when it
is set, else DEFAULT_URL when a Redis answers there, else none (limits per process, budgets lost at a restart).
Prints the URL (empty for none) on stdout, for the demo to export, and a sentence saying which on stderr."""

from __future__ import annotations

import argparse
import os
import sys

import redis

DEFAULT_URL = "redis://127.0.0.1:6379/1"


def answers(url: str) -> bool:
    """Whether a Redis answers PING at `url` within a second."""
    client = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def choose(configured: str, default: str) -> tuple[str, str]:
    """(the URL to use, empty for none; the sentence that says which)."""
    if configured:
        note = "" if answers(configured) else " (not answering now: per process until it does)"
        return configured, f"Gateway limits: shared in Redis at {configured}{note}"
    if answers(default):
        return default, f"Gateway limits: shared in Redis at {default} (found; set GATEWAY_REDIS_URL to choose)"
    return "", "Gateway limits: per process (no Redis configured: set GATEWAY_REDIS_URL)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.demo_redis", description=__doc__)
    parser.add_argument("--default", default=DEFAULT_URL, help="Where a Redis is looked for when none is set.")
    args = parser.parse_args(argv)
    url, sentence = choose(os.environ.get("GATEWAY_REDIS_URL", ""), args.default)
    print(sentence, file=sys.stderr)
    print(url)


if __name__ == "__main__":
    main()
