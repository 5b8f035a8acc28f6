"""Upstream answers that break the protocol (issue 12, point 5): each is recorded as an upstream error and answered
with an OpenAI-shaped 502 (a stream whose headers already went out ends with an error event instead of `[DONE]`);
the final stream event is held back until the call is committed, however the bytes are chunked."""

from __future__ import annotations

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.proxy import split_held
from gateway.records import CallStatus
from tests.gateway.api_support import chat, create_rollouts, error_of
from tests.gateway.hostile_upstream import Answer, HostileUpstream

GOOD = {"id": "c1", "prompt_token_ids": [1, 2], "choices": [{"index": 0, "message": {"content": "hi"},
                                                               "token_ids": [3], "finish_reason": "stop"}]}
SSE = "text/event-stream"


@pytest.fixture(scope="module")
def hostile(gateway):
    upstream = HostileUpstream().start()
    from gateway.client import GatewayClient
    from tests.gateway.support import ADMIN_TOKEN

    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.register_model("hostile", upstream.base_url)
    yield upstream
    upstream.stop()


def json_answer(body, status: int = 200, **headers: str) -> Answer:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return Answer((raw,), status=status, headers=(("content-type", "application/json"), *headers.items()))


def sse(*events, done: bytes = b"data: [DONE]\n\n") -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + done


def post(created, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(created.base_url + "/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}"}, **kwargs)


BROKEN_UNARY = {
    "a JSON list": json_answer([GOOD]),
    "choices: [1]": json_answer({**GOOD, "choices": [1]}),
    "policy_version abc": json_answer({**GOOD, "policy_version": "abc"}),
    "a token id above 2^31": json_answer({**GOOD, "prompt_token_ids": [2**31]}),
    "a negative token id": json_answer({**GOOD, "choices": [{"index": 0, "token_ids": [-1]}]}),
    "token ids as text": json_answer({**GOOD, "prompt_token_ids": "1,2"}),
    "a logprob that is text": json_answer({**GOOD, "choices": [{"index": 0, "logprobs": {"content": [
        {"logprob": "low"}]}}]}),
    "a choice index of a billion": json_answer({**GOOD, "choices": [{"index": 10**9}]}),
    "content that is a number": json_answer({**GOOD, "choices": [{"message": {"content": 7}}]}),
    "a 200 that is not JSON": json_answer(b"<html>oops</html>"),
    "an x-policy-version of abc": json_answer(GOOD, **{"x-policy-version": "abc"}),
    "the engine's own 500": json_answer(b"Internal Server Error", status=500),
}


@pytest.mark.parametrize("answer", BROKEN_UNARY.values(), ids=BROKEN_UNARY.keys())
def test_a_broken_unary_answer_is_recorded_and_answered_502(admin, hostile, answer: Answer) -> None:
    hostile.answer = answer
    (created,) = create_rollouts(admin, prefix="broken")
    error = error_of(post(created, chat("hostile")), 502)
    [call] = admin.calls(created.id)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_protocol_error")
    assert (call.status, call.http_status, call.response_token_ids) == (CallStatus.ERROR, 502, [])
    assert call.error and call.response_raw == answer.chunks[0].decode("utf-8", "replace")


def test_a_good_answer_still_passes_byte_for_byte(admin, hostile) -> None:
    hostile.answer = json_answer({**GOOD, "policy_version": "7"})  # a numeric string is a version
    (created,) = create_rollouts(admin, prefix="good")
    response = post(created, chat("hostile"))
    [call] = admin.calls(created.id)
    assert (response.status_code, response.content) == (200, hostile.answer.chunks[0])
    assert (call.status, call.policy_version, call.prompt_token_ids, call.response_token_ids) == (
        CallStatus.OK, 7, [1, 2], [3])


def test_a_stream_with_a_non_numeric_policy_version_header_is_502(admin, hostile) -> None:
    hostile.answer = Answer((sse(GOOD),), headers=(("content-type", SSE), ("x-policy-version", "abc")))
    (created,) = create_rollouts(admin, prefix="badhdr")
    error = error_of(post(created, chat("hostile", stream=True)), 502)
    [call] = admin.calls(created.id)
    assert "abc" in error["message"] and (call.status, call.http_status) == (CallStatus.ERROR, 502)


@pytest.mark.parametrize("bad", [b"data: [1]\n\n", b'data: {"choices": [1]}\n\n', b"data: {nope\n\n",
                                 b'data: {"prompt_token_ids": [4294967296]}\n\n'])
def test_a_stream_breaking_mid_way_ends_with_an_error_event_not_done(admin, hostile, bad: bytes) -> None:
    hostile.answer = Answer((sse(GOOD, done=b""), bad, b"data: [DONE]\n\n"), headers=(("content-type", SSE),))
    (created,) = create_rollouts(admin, prefix="badchunk")
    response = post(created, chat("hostile", stream=True))
    [call] = admin.calls(created.id)
    assert response.status_code == 200 and b"[DONE]" not in response.content
    assert b"upstream_protocol_error" in response.content.splitlines()[-2]
    assert call.status == CallStatus.ERROR and "breaks the protocol" in call.error


def test_done_split_across_chunks_reaches_the_client_only_with_the_recorded_call(admin, hostile) -> None:
    body = sse(GOOD)
    cut = body.index(b"[DONE]") + 3
    hostile.answer = Answer((body[:cut], body[cut:]), headers=(("content-type", SSE),), pause_s=0.3)
    (created,) = create_rollouts(admin, prefix="split")
    seen = b""
    with httpx.stream("POST", created.base_url + "/chat/completions", json=chat("hostile", stream=True),
                      headers={"authorization": f"Bearer {created.api_key}"}, timeout=30) as response:
        for chunk in response.iter_raw():
            seen += chunk
            if b"[DO" in seen:
                assert b"[DONE]" in seen, "a partial final line was sent before the rest of it"
                assert len(admin.calls(created.id)) == 1, "[DONE] reached the client before the call was recorded"
    assert seen == body


SSE_BODY = sse(GOOD, {"choices": [{"index": 0, "delta": {"content": "!"}, "token_ids": [4]}]})


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(SSE_BODY)), max_size=6))
def test_split_held_never_releases_done_however_the_bytes_are_chunked(cuts: list[int]) -> None:
    bounds = sorted({0, len(SSE_BODY), *cuts})
    chunks = [SSE_BODY[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    sent, pending, done = b"", b"", False
    for chunk in chunks:
        if done:
            pending += chunk
            continue
        ready, pending, done = split_held(pending + chunk)
        sent += ready
    assert b"[DONE]" not in sent and b"DONE" not in sent and sent.endswith(b"\n")
    assert sent + pending == SSE_BODY and done
