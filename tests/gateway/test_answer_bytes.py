"""The engine's answer joins its request's charge as it arrives (gateway/proxy.py `answer_charge`): the harness
decides an answer's size (`n`, `max_tokens`, `top_logprobs`), and a 120-byte request made the gateway read and parse
a 34 MB answer (+237 MB) uncharged. An answer past the rollout's share is read no further: a unary call is answered
with the refusal (413 `answer_too_large`), a stream is cut with an error event, and either is recorded as
`answer_too_large`; a smaller answer is served as before, and nothing stays charged."""

from __future__ import annotations

import httpx
import orjson
import pytest
import yaml

from gateway.client import GatewayClient
from gateway.scripted import Script
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

SHARE = 4_000_000


@pytest.fixture(scope="module", params=["small", "large"])
def served(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"answer-bytes-{request.param}")
    tokens = 16 if request.param == "small" else 40_000  # about 3 MB unary, 12 MB streamed: past the share
    upstream = InProcessScripted(Script(prompt_tokens=8, response_tokens=tokens)).start()
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump({"max_request_bytes_in_flight_per_rollout": SHARE}))
    gw = InProcessGateway(folder / "store.db", config_path=config).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url)
    yield gw, request.param
    gw.stop()
    upstream.stop()


def _call(gw, path: str, body: dict):
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        (mine,) = create_rollouts(admin, 1)
    answer = httpx.post(mine.base_url + path, json=body, timeout=60,
                        headers={"authorization": f"Bearer {mine.api_key}"})
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        calls = admin.calls(mine.id, attempt=0)
    return answer, calls


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}),
    ("/messages", {"model": "policy", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}),
    ("/responses", {"model": "policy", "input": "hi"}),
])
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_past_the_share_is_read_no_further_and_recorded_as_too_large(served, path, body, stream):
    gw, size = served
    answer, calls = _call(gw, path, {**body, "stream": stream})
    (call,) = calls
    if size == "small":
        assert answer.status_code == 200 and call.status == "ok"
        return
    assert call.status == "error" and call.error_code == "answer_too_large"
    assert "max_request_bytes_in_flight_per_rollout" in call.error
    if stream:
        assert answer.status_code == 200 and b"answer_too_large" in answer.content  # the error event, no [DONE]
        assert b"[DONE]" not in answer.content
    else:
        assert answer.status_code == 413
        error = str(orjson.loads(answer.content)["error"])  # OpenAI's shape, or Anthropic's
        assert "answer_too_large" in error and "lower max_tokens, n or top_logprobs" in error


def test_the_engines_tokenization_is_charged_as_an_answer(tmp_path):
    """count_tokens reads the engine's /tokenize answer (one id a prompt token: the harness's prompt decides its
    size): 4.5 MB of text had the gateway hold about 98 MB uncharged."""
    upstream = InProcessScripted(Script(prompt_tokens=300_000, response_tokens=4)).start()
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"max_request_bytes_in_flight_per_rollout": SHARE}))
    gw = InProcessGateway(tmp_path / "store.db", config_path=config).start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
        answer, calls = _call(gw, "/messages/count_tokens",
                              {"model": "policy", "messages": [{"role": "user", "content": "hi"}]})
    finally:
        gw.stop()
        upstream.stop()
    assert answer.status_code == 413 and "answer_too_large" in answer.text
    assert [call.error_code for call in calls] == ["answer_too_large"]
