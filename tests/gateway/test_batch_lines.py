"""A batch file's rules, worked by hand: what the upload takes, which lines are requests the batch sends, and
the error file's line for one that is not."""

from __future__ import annotations

import json

import pytest

from gateway import batch_vocab as bv
from gateway.batch_lines import checked_file, checked_line, refused, split_lines
from gateway.validation import Invalid

ENDPOINT = "/v1/chat/completions"
BODY = {"model": "chat", "messages": []}


def line(**fields) -> bytes:
    return json.dumps({"custom_id": "a", "method": "POST", "url": ENDPOINT, "body": BODY, **fields}).encode()


def test_lines_are_numbered_by_their_place_and_a_final_newline_ends_the_last():
    assert split_lines(b"a\nb\n") == [b"a", b"b"]
    assert split_lines(b"a\r\n\nc") == [b"a", b"", b"c"]  # a blank line keeps its number (and is refused)
    assert checked_file(b"a\n\nc\n") == 3


@pytest.mark.parametrize(("content", "words"), [
    (b"", "empty"), (b" \n\n", "empty"), (b"ok\n\xff\n", "not UTF-8 (byte 3)"),
    (b"x\n" * (bv.MAX_FILE_LINES + 1), f"{bv.MAX_FILE_LINES + 1} lines"),
], ids=["nothing", "blank", "latin1", "too-many-lines"])
def test_a_file_the_upload_refuses(content, words):
    with pytest.raises(Invalid) as caught:
        checked_file(content)
    assert words in caught.value.message and caught.value.param == "file"


@pytest.mark.parametrize(("raw", "param"), [
    (b"{not json", None), (b"[1]", None), (line(custom_id=""), "custom_id"), (line(custom_id=7), "custom_id"),
    (line(custom_id="c" * (bv.MAX_CUSTOM_ID_CHARS + 1)), "custom_id"), (line(method="GET"), "method"),
    (line(url="/v1/completions"), "url"), (line(body="hi"), "body"), (line(body={**BODY, "stream": True}), "body.stream"),
], ids=["not-json", "not-object", "empty-id", "number-id", "long-id", "get", "other-url", "text-body", "stream"])
def test_a_line_that_is_not_a_request_is_refused_naming_the_field(raw, param):
    with pytest.raises(Invalid) as caught:
        checked_line(raw, ENDPOINT, set())
    assert caught.value.param == param


def test_a_custom_id_is_used_once_in_a_file():
    seen: set[str] = set()
    assert checked_line(line(), ENDPOINT, seen) == ("a", BODY)
    with pytest.raises(Invalid, match="used by an earlier line"):
        checked_line(line(), ENDPOINT, seen)


def test_the_error_files_line_names_the_line_and_the_field():
    entry = json.loads(refused("d", 4, Invalid("'url' must be the batch's endpoint.", "url")))
    assert entry["id"].startswith("batch_req_") and (entry["custom_id"], entry["response"]) == ("d", None)
    assert entry["error"] == {"code": "invalid_request", "message": "'url' must be the batch's endpoint.",
                              "param": "url", "line": 4}


def test_the_demos_nightly_batch_is_made_of_requests_the_runner_sends():
    from gateway.demo_batch import nightly_file

    seen: set[str] = set()
    lines = split_lines(nightly_file("llama-8b-chat", 30, night=2))
    assert len(lines) == checked_file(nightly_file("llama-8b-chat", 30, night=2)) == 30
    assert all(checked_line(raw, ENDPOINT, seen)[1]["model"] == "llama-8b-chat" for raw in lines)
