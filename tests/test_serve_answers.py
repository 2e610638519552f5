"""`serve/answers.py`: what the hot path reads from a copy of an upstream answer (usage, whether it
ends in a tool call, through gzip or deflate) and the error messages it writes."""

import gzip
import logging
import zlib

import orjson
import pytest

from agentrt.serve.answers import TOOL_FINISH, body_decoder, error_response, inflate, read_answer, upstream_error


def test_usage_and_tool_call_are_read_from_a_json_answer():
    body = orjson.dumps({"choices": [{"finish_reason": "stop"}, {"finish_reason": "tool_calls"}],
                         "usage": {"prompt_tokens": 7, "completion_tokens": 2}})
    assert read_answer(body) == ({"prompt_tokens": 7, "completion_tokens": 2}, True)
    assert read_answer(orjson.dumps({"choices": [{"finish_reason": "length"}]})) == (None, False)


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"usage": 3, "choices": "x"}', b""])
def test_answers_that_are_not_an_openai_object_give_nothing(body):
    assert read_answer(body) == (None, False)


def test_the_streamed_tool_finish_is_matched_with_or_without_spaces():
    assert TOOL_FINISH.search(b'data: {"finish_reason" : "function_call"}')
    assert not TOOL_FINISH.search(b'data: {"finish_reason": "stop"}')


@pytest.mark.parametrize("encoding,pack", [(b"gzip", gzip.compress), (b"deflate", zlib.compress),
                                           (b" X-Gzip ", gzip.compress)])
def test_compressed_answers_are_read_through_their_encoding(encoding, pack):
    dec = body_decoder(encoding)
    assert inflate(dec, pack(b'{"usage": {"total_tokens": 5}}')) == b'{"usage": {"total_tokens": 5}}'


def test_identity_is_read_as_is_and_unknown_encodings_are_not_read():
    assert body_decoder(None) is None and body_decoder(b"identity") is None
    assert body_decoder(b"br") is False


def test_a_corrupt_compressed_body_reads_as_nothing():
    assert inflate(body_decoder(b"gzip"), b"\x1f\x8b garbage") == b""


def test_error_responses_have_openai_shape():
    status, body = error_response(413, "too big", "PayloadTooLargeError", "body")
    err = orjson.loads(body)["error"]
    assert status == 413 and err["message"] == "too big" and err["param"] == "body"
    assert err["type"] == "PayloadTooLargeError"


def test_upstream_errors_hide_the_address_from_tenants_and_log_it(caplog):
    assert upstream_error("http://10.0.0.5:8000", False, "unreachable", "refused", where=True) == \
        "upstream http://10.0.0.5:8000 unreachable: refused"
    with caplog.at_level(logging.WARNING, logger="agentrt.serve"):
        hidden = upstream_error("http://10.0.0.5:8000", True, "unreachable", "refused", where=True)
    assert hidden == "upstream unreachable" and "10.0.0.5" in caplog.text
    assert upstream_error("u", True, "answer broke off", "read timed out after 5 s", timeout=True) == \
        "upstream answer broke off: read timed out after 5 s"
