"""Only the fields the gateway's table forwards reach the engine (gateway/request_fields.py): per field, forwarded,
dropped with its name recorded, or refused with a 400 naming it; chat and completions, train and val, unary and
streamed; a constraining response_format and a forcing tool_choice are recorded; the translated protocols cannot
smuggle a field through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.errors import BadRequest
from gateway.protocols import anthropic_request, responses_request
from gateway.records import CallStatus, RolloutMode
from gateway.request_fields import (
    CHAT,
    COMPLETION,
    ENGINE_DEFAULTS,
    FIELDS,
    FORWARDED,
    REFUSED,
    Action,
    check_refused,
    kind_of,
    screen,
)
from tests.gateway.api_support import chat, completion, create_rollouts, error_of, write_config
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

ROUTES = {CHAT: ("/chat/completions", chat), COMPLETION: ("/completions", completion)}
MODES = (RolloutMode.TRAIN, RolloutMode.VAL)
VALUES: dict[str, Any] = {  # a value the engine would honour, per refused field (anything not null is refused)
    "structured_outputs": {"choice": ["yes", "no"]}, "guided_choice": ["yes", "no"], "guided_regex": "[0-9]+",
    "guided_json": {"type": "object"}, "guided_grammar": "root ::= \"a\"", "allowed_token_ids": [1, 2, 3],
    "bad_words": ["no"], "min_tokens": 50, "logits_processors": ["m:LP"], "vllm_xargs": {"k": 1},
    "add_generation_prompt": False, "continue_final_message": True,
    "chat_template": "{{ messages }}", "chat_template_kwargs": {"enable_thinking": True}, "echo": True,
    "truncate_prompt_tokens": 3, "kv_transfer_params": {"prompt_token_ids": [1, 2, 3]}, "use_beam_search": True,
    "add_special_tokens": False, "suffix": "end", "prompt_embeds": "AAAA", "functions": [{"name": "f"}],
}
DROPPED = {"user": "u1", "metadata": {"k": "v"}, "store": True, "service_tier": "auto", "priority": -100,
           "prompt_logprobs": 20, "request_id": "another-rollouts-id", "x_unknown_field": {"any": 1}}


@pytest.fixture(scope="module")
def admin(tmp_path_factory, scripted):
    """A gateway with the default sampling policy (train calls enforced)."""
    path = write_config(tmp_path_factory.mktemp("cfg") / "gateway.yaml")
    gateway = InProcessGateway(db_path=tmp_path_factory.mktemp("gw") / "store.db", config_path=path).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("policy", scripted.base_url, version=1)
        yield client
    gateway.stop()


def post(admin: GatewayClient, path: str, body: dict[str, Any], mode: RolloutMode) -> tuple[httpx.Response, list]:
    (created,) = create_rollouts(admin, prefix="fields", mode=mode)
    response = httpx.post(created.base_url + path, json=body, timeout=30,
                          headers={"authorization": f"Bearer {created.api_key}"})
    return response, admin.calls(created.id)


def forwarded(scripted) -> dict[str, Any]:
    return orjson.loads(scripted.upstream.last_request[1])


def test_every_refused_field_of_the_table_is_refused_naming_it_and_null_counts_as_absent() -> None:
    for kind, refused in REFUSED.items():
        for key in refused:
            with pytest.raises(BadRequest) as caught:
                value = VALUES.get(key, 1)
                check_refused({"model": "m", key: not value if value == ENGINE_DEFAULTS[kind].get(key) else value},
                              kind)
            assert caught.value.param == key and key in caught.value.message
            check_refused({key: None}, kind)


def test_a_refused_field_at_the_engines_default_asks_for_nothing_and_is_dropped() -> None:
    for kind in (CHAT, COMPLETION):
        check_refused({"echo": False, "min_tokens": 0, "use_beam_search": False, "bad_words": []}, kind)
        for key, value in (("echo", 0), ("min_tokens", False), ("use_beam_search", 1), ("bad_words", ["x"])):
            with pytest.raises(BadRequest):
                check_refused({key: value}, kind)  # another value, or another JSON type than the default's
    check_refused({"add_generation_prompt": True, "add_special_tokens": False}, CHAT)
    check_refused({"add_special_tokens": True}, COMPLETION)
    assert screen(chat(echo=False, add_generation_prompt=True), CHAT)[1] == ["add_generation_prompt", "echo"]


def test_vllms_decoding_and_prompt_fields_are_all_in_the_table() -> None:
    """The fields of vLLM 0.32's ChatCompletionRequest / CompletionRequest that shape tokens or the prompt (read from
    vllm/entrypoints/openai/{chat_completion,completion}/protocol.py) are refused, none forwarded by omission."""
    shaping = {"structured_outputs", "allowed_token_ids", "bad_words", "min_tokens", "vllm_xargs", "echo",
               "truncate_prompt_tokens", "add_special_tokens", "kv_transfer_params", "use_beam_search",
               "length_penalty", "thinking_token_budget", "repetition_detection", "watermarking", "mm_payload"}
    chat_only = {"add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs",
                 "documents"}
    assert shaping | chat_only <= set(REFUSED[CHAT])
    assert shaping | {"prompt_embeds", "suffix"} <= set(REFUSED[COMPLETION])
    assert FORWARDED[CHAT] & set(REFUSED[CHAT]) == {"kv_transfer_params"}  # the gateway's own (recorded turns)
    assert {action for table in FIELDS.values() for action, _ in table.values()} == set(Action)


@pytest.mark.parametrize("kind", [CHAT, COMPLETION])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_refused_field_is_a_400_naming_it_and_nothing_is_forwarded_or_recorded(admin, scripted, kind, mode,
                                                                                   stream) -> None:
    path, body = ROUTES[kind]
    before = scripted.upstream.last_request
    for key in ("structured_outputs", "min_tokens", "kv_transfer_params", "echo", "allowed_token_ids"):
        response, calls = post(admin, path, body(stream=stream, **{key: VALUES[key]}), mode)
        error = error_of(response, 400)
        assert error["param"] == key and key in error["message"] and calls == []
    assert scripted.upstream.last_request == before


@pytest.mark.parametrize("kind", [CHAT, COMPLETION])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_dropped_fields_do_not_reach_the_engine_and_their_names_are_recorded(admin, scripted, kind, mode,
                                                                             stream) -> None:
    path, body = ROUTES[kind]
    sent = body(stream=stream, max_tokens=4, stop=["\n"], seed=3, echo=False, ignore_eos=True,
                include_stop_str_in_output=True, **DROPPED)
    response, (record,) = post(admin, path, sent, mode)
    assert response.status_code == 200, response.text
    engine = forwarded(scripted)
    assert not set(DROPPED) & set(engine)
    assert {key: engine[key] for key in ("max_tokens", "stop", "seed", "stream", "ignore_eos",
                                         "include_stop_str_in_output")} == {
        "max_tokens": 4, "stop": ["\n"], "seed": 3, "stream": stream, "ignore_eos": True,
        "include_stop_str_in_output": True}
    assert record.status == CallStatus.OK and record.request == sent  # the harness's request as it sent it
    assert not {"echo", *DROPPED} & set(engine)
    assert record.sampling.requested["dropped"] == sorted({"echo", *DROPPED})


FORWARDED_VALUES: dict[str, Any] = {  # a value per forwarded field the harness may set (the scripted engine takes any)
    "stream_options": {"include_usage": True}, "max_tokens": 5, "n": 2, "stop": ["x"], "seed": 4, "temperature": 0.5,
    "top_p": 0.9, "top_k": 7, "min_p": 0.1, "frequency_penalty": 0.2, "presence_penalty": 0.3,
    "repetition_penalty": 1.1, "logit_bias": {"5": 1.0}, "response_format": {"type": "json_object"},
    "logprobs": True, "stop_token_ids": [7], "ignore_eos": True, "include_stop_str_in_output": True,
    "skip_special_tokens": False, "spaces_between_special_tokens": False, "return_tokens_as_token_ids": True,
    "tools": [], "tool_choice": "none",
    "parallel_tool_calls": False, "max_completion_tokens": 5, "top_logprobs": 2,
}
POLICY_REPLACED = {"temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                   "repetition_penalty", "logit_bias", "response_format"}  # on an enforced train call


@pytest.mark.parametrize("kind", [CHAT, COMPLETION])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_every_forwarded_field_reaches_the_engine_as_sent_unless_the_policy_replaces_it(admin, scripted, kind, mode,
                                                                                        stream) -> None:
    path, body = ROUTES[kind]
    assert set(FORWARDED_VALUES) <= FORWARDED[CHAT]  # what the harnesses send stays forwarded
    fields = {key: value for key, value in FORWARDED_VALUES.items() if key in FORWARDED[kind]}
    assert set(FORWARDED[kind]) - set(fields) <= {"model", "stream", "messages", "prompt", "return_token_ids",
                                                  "kv_transfer_params"}  # every other forwarded field is tried
    if kind == COMPLETION:
        fields["logprobs"] = 1
    response, (record,) = post(admin, path, body(stream=stream, **fields), mode)
    assert response.status_code == 200, response.text
    engine = forwarded(scripted)
    replaced = POLICY_REPLACED if mode == RolloutMode.TRAIN else set()
    assert {key: engine.get(key) for key in fields if key not in replaced} == {
        key: value for key, value in fields.items() if key not in replaced}
    assert "dropped" not in record.sampling.requested


def test_only_table_fields_reach_the_engine_and_a_clean_body_is_not_copied() -> None:
    body = chat(user="u", temperature=0.5, tools=[], response_format={"type": "text"})
    kept, dropped = screen(body, CHAT)
    assert set(kept) == {"model", "messages", "temperature", "tools", "response_format"} and dropped == ["user"]
    assert kind_of(chat(prompt=None)) == CHAT and kind_of(completion(messages=None)) == COMPLETION
    clean = chat(max_tokens=3)
    assert screen(clean, CHAT) == (clean, []) and screen(clean, CHAT)[0] is clean


JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_constraining_response_format_is_removed_on_enforced_train_calls_and_recorded_on_val_calls(
        admin, scripted, stream) -> None:
    _, (record,) = post(admin, "/chat/completions", chat(stream=stream, response_format=JSON_FORMAT),
                        RolloutMode.TRAIN)
    assert "response_format" not in forwarded(scripted)
    assert record.sampling.requested == {"response_format": JSON_FORMAT} and record.sampling.enforced
    _, (record,) = post(admin, "/chat/completions", chat(stream=stream, response_format=JSON_FORMAT),
                        RolloutMode.VAL)
    assert forwarded(scripted)["response_format"] == JSON_FORMAT
    assert record.sampling.requested == {"response_format": JSON_FORMAT} and not record.sampling.enforced
    _, (record,) = post(admin, "/chat/completions", chat(response_format={"type": "text"}), RolloutMode.TRAIN)
    assert forwarded(scripted)["response_format"] == {"type": "text"} and record.sampling.requested == {}


def test_a_responses_text_format_is_a_constraint_like_chats(admin, scripted) -> None:
    body = {"model": "policy", "input": "hi", "text": {"format": {"type": "json_object"}}}
    _, (record,) = post(admin, "/responses", body, RolloutMode.VAL)
    assert forwarded(scripted)["response_format"] == {"type": "json_object"}
    assert record.sampling.requested == {"response_format": {"type": "json_object"}}


def test_a_forcing_tool_choice_is_forwarded_and_recorded(admin, scripted) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for choice, recorded in (("required", {"tool_choice": "required"}), ("auto", {})):
        _, (record,) = post(admin, "/chat/completions", chat(tools=tools, tool_choice=choice), RolloutMode.TRAIN)
        assert forwarded(scripted)["tool_choice"] == choice and record.sampling.requested == recorded
    body = {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "f"}}
    _, (record,) = post(admin, "/messages", body, RolloutMode.TRAIN)
    assert record.sampling.requested == {"tool_choice": {"type": "function", "function": {"name": "f"}}}


@pytest.mark.parametrize(("path", "body"), [
    ("/messages", {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
    ("/responses", {"model": "policy", "input": "hi"}),
], ids=["messages", "responses"])
@pytest.mark.parametrize("key", ["kv_transfer_params", "extra_body", "structured_outputs", "chat_template"])
def test_the_translated_protocols_refuse_an_engine_field_naming_it(admin, scripted, path, body, key) -> None:
    before = scripted.upstream.last_request
    response, calls = post(admin, path, {**body, key: {"prompt_token_ids": [1]}}, RolloutMode.TRAIN)
    assert response.status_code == 400 and key in response.text and calls == []
    assert scripted.upstream.last_request == before


def test_every_field_a_translated_protocol_writes_is_one_the_table_forwards() -> None:
    """The adapters build their chat request field by field: from bodies using every field they accept, the keys
    written are all forwarded (a field added to an adapter but not to the table would be dropped, and fail here)."""
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    messages = anthropic_request.to_chat({
        "model": "m", "max_tokens": 8, "system": "s", "messages": [{"role": "user", "content": "hi"}], "tools": tools,
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True}, "temperature": 0.5,
        "top_p": 0.9, "top_k": 5, "stop_sequences": ["x"], "metadata": {"user_id": "u"}})
    responses = responses_request.chat_request({
        "model": "m", "input": "hi", "instructions": "s", "max_output_tokens": 8, "temperature": 0.5, "top_p": 0.9,
        "stop": ["x"], "parallel_tool_calls": False, "tool_choice": "required",
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "text": {"format": {"type": "json_object"}}}, [], [])
    for chat_body in (messages, responses):
        assert set(chat_body) <= FORWARDED[CHAT] and screen(chat_body, CHAT)[1] == []
    assert {"parallel_tool_calls", "tool_choice", "tools"} <= set(messages)
    assert {"response_format", "max_tokens", "stop"} <= set(responses)


def test_the_readme_table_names_every_field_of_the_table() -> None:
    readme = (Path(__file__).parents[2] / "gateway" / "README.md").read_text()
    section = readme[readme.index("Request fields (`request_fields.py`"):readme.index("Model names, side calls")]
    assert [key for table in FIELDS.values() for key in table if f"`{key}`" not in section] == []
