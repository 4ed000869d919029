"""`python -m gateway.demo_batch`: the demo's nightly-style batch. Every `--every` seconds it uploads a JSONL
file of summarising requests with the official openai client, creates a batch of it at the gateway, follows it
to its end and prints its counts; the gateway runs its lines in the lowest band beside the interactive load."""

from __future__ import annotations

import argparse
import json
import time

TOPICS = ("invoices", "support tickets", "release notes", "incident reports", "contracts", "meeting notes")


def nightly_file(model: str, lines: int, night: int) -> bytes:
    """`lines` chat requests, one a line, as a nightly summarising job would send them."""
    return "".join(json.dumps({
        "custom_id": f"night-{night}-doc-{n}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": model, "max_tokens": 64, "messages": [
            {"role": "system", "content": "Summarise the document in three sentences."},
            {"role": "user", "content": f"Document {n} of the day's {TOPICS[n % len(TOPICS)]}. " * 40}]},
    }) + "\n" for n in range(lines)).encode()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.demo_batch", description=__doc__)
    parser.add_argument("--target", default="http://127.0.0.1:8080", help="The gateway's base URL.")
    parser.add_argument("--key-file", required=True, help="A file holding an inference key.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--every", type=float, default=900.0, help="Seconds from one batch's start to the next.")
    args = parser.parse_args(argv)
    import openai

    with open(args.key_file) as handle:
        api = openai.OpenAI(base_url=f"{args.target}/v1", api_key=handle.read().strip())
    night = 0
    while True:
        started = time.monotonic()
        try:
            upload = api.files.create(file=(f"night-{night}.jsonl", nightly_file(args.model, args.lines, night)),
                                      purpose="batch")
            batch = api.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                       completion_window="24h", metadata={"job": "nightly-summaries"})
            print(f"batch {batch.id}: {args.lines} lines queued", flush=True)
            while batch.status not in ("completed", "failed", "expired", "cancelled"):
                time.sleep(10)
                batch = api.batches.retrieve(batch.id)
            counts = batch.request_counts
            print(f"batch {batch.id} {batch.status}: {counts.completed} answered, {counts.failed} failed",
                  flush=True)
        except openai.OpenAIError as exc:  # the gateway restarting, say: the next night tries again
            print(f"batch not run: {exc}", flush=True)
        night += 1
        time.sleep(max(0.0, args.every - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
