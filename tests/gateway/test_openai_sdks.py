"""The official `openai` Python SDK, unmodified, through the gateway in front of the scripted upstream: Responses
(`client.responses.create`, streamed and not, function calls both ways, `previous_response_id` from the rollout's
recorded calls) and chat completions with tools. Each call is checked as recorded: the harness's request, the
answer as it saw it, the engine's token IDs and policy version."""

from __future__ import annotations

import json

import openai
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import CallRecord
from gateway.scripted import Script
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

PROMPT_TOKENS, RESPONSE_TOKENS, VERSION = 12, 6, 4
TOOLS = [{"type": "function", "name": name, "description": f"{name} something",
          "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}}}
         for name in ("read_file", "run")]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in TOOLS]


@pytest.fixture(scope="module")
def upstream():
    """Every answer calls read_file and run (two parallel calls) after its text; an answer to tool results is text."""
    scripted = InProcessScripted(Script(prompt_tokens=PROMPT_TOKENS, response_tokens=RESPONSE_TOKENS,
                                        policy_version=VERSION, tool_calls=("read_file", "run"),
                                        answer_tool_results=True)).start()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def gateway_admin(tmp_path_factory, upstream):
    gw = InProcessGateway(db_url=f"sqlite:///{tmp_path_factory.mktemp('gw') / 'store.db'}").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url, version=VERSION)
        yield admin
    gw.stop()


@pytest.fixture
def rollout(gateway_admin):
    (created,) = create_rollouts(gateway_admin)
    client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0, timeout=30)
    yield created.id, client
    client.close()


def upstream_chat(upstream: InProcessScripted) -> dict:
    """The chat-completions request the engine received last."""
    path, body = upstream.upstream.last_request
    assert path == "/v1/chat/completions"
    return orjson.loads(body)


def only_call(admin: GatewayClient, rollout_id: str, seq: int = -1) -> CallRecord:
    return admin.calls(rollout_id)[seq]


def assert_engine_tokens(call: CallRecord) -> None:
    assert call.kind == "responses" and call.status == "ok"
    assert call.prompt_token_ids == list(range(1000, 1000 + PROMPT_TOKENS))
    assert call.response_token_ids == list(range(5000, 5000 + RESPONSE_TOKENS))
    assert len(call.response_logprobs) == RESPONSE_TOKENS
    assert call.policy_version == VERSION


def test_responses_unary_with_function_calls_both_ways(rollout, upstream, gateway_admin):
    rollout_id, client = rollout
    first = client.responses.create(model="policy", instructions="You fix bugs.", input="fix a.py", tools=TOOLS,
                                    store=False, include=["reasoning.encrypted_content"],
                                    reasoning={"effort": "low"}, prompt_cache_key="k")
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("read_file", {"step": 0}), ("run", {"step": 1})]
    assert first.output_text == "t" * RESPONSE_TOKENS and first.status == "completed"
    assert (first.usage.input_tokens, first.usage.output_tokens) == (PROMPT_TOKENS, RESPONSE_TOKENS)
    recorded = only_call(gateway_admin, rollout_id)
    assert recorded.request["input"] == "fix a.py" and recorded.request["store"] is False
    assert orjson.loads(recorded.response_raw) == first.model_dump(mode="json", exclude_unset=True)
    assert recorded.response_id == first.id
    assert_engine_tokens(recorded)

    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": f"{c.name} ok"} for c in calls]
    second = client.responses.create(model="policy", instructions="You fix bugs.", tools=TOOLS,
                                     input=[{"role": "user", "content": "fix a.py"}, *first.output, *outputs])
    assert [item.type for item in second.output] == ["message"] and second.output_text
    sent = upstream_chat(upstream)["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert [(c["id"], c["function"]["name"]) for c in sent[2]["tool_calls"]] == [(c.call_id, c.name) for c in calls]
    assert [m["tool_call_id"] for m in sent[3:]] == [c.call_id for c in calls]
    assert upstream_chat(upstream)["tools"] == CHAT_TOOLS


def test_responses_streamed_with_function_calls(rollout, upstream, gateway_admin):
    rollout_id, client = rollout
    events = list(client.responses.create(model="policy", input="fix a.py", tools=TOOLS, stream=True))
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert [(i.name, i.arguments) for i in final.output if i.type == "function_call"] == [
        ("read_file", '{"step": 0}'), ("run", '{"step": 1}')]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == '{"step": 0}{"step": 1}'
    recorded = only_call(gateway_admin, rollout_id)
    assert recorded.stream and recorded.response_id == final.id
    assert recorded.response_raw.count("event: ") == len(events)
    assert_engine_tokens(recorded)

    outputs = [{"type": "function_call_output", "call_id": i.call_id, "output": "ok"}
               for i in final.output if i.type == "function_call"]
    with client.responses.stream(model="policy", input=[*final.output, *outputs], tools=TOOLS) as stream:
        last = list(stream)[-1]  # the SDK's helper accumulates the events (it checks their ids and order)
    assert last.type == "response.incomplete"  # the scripted text answer stops on length, as OpenAI ends such a stream
    answer = last.response
    assert answer.output_text == "t" * RESPONSE_TOKENS and answer.status == "incomplete"
    assert answer.incomplete_details.reason == "max_output_tokens"


def test_previous_response_id_is_served_from_the_rollouts_recorded_calls(rollout, upstream, gateway_admin):
    rollout_id, client = rollout
    first = client.responses.create(model="policy", instructions="old", input="fix a.py", tools=TOOLS, store=False)
    calls = [item for item in first.output if item.type == "function_call"]
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "done"} for c in calls]
    second = client.responses.create(model="policy", instructions="new", previous_response_id=first.id,
                                     input=outputs, tools=TOOLS, stream=True)
    final = [event for event in second][-1].response
    assert final.previous_response_id == first.id
    sent = upstream_chat(upstream)["messages"]
    assert sent[0] == {"role": "system", "content": "new"}
    assert sent[1] == {"role": "user", "content": "fix a.py"}
    assert sent[2]["content"] == "t" * RESPONSE_TOKENS and len(sent[2]["tool_calls"]) == 2
    assert [m["role"] for m in sent[3:]] == ["tool", "tool"]
    third = client.responses.create(model="policy", previous_response_id=final.id, input="and now?")
    assert third.output_text
    assert [m["role"] for m in upstream_chat(upstream)["messages"]] == [
        "user", "assistant", "tool", "tool", "assistant", "user"]
    assert [c.request.get("previous_response_id") for c in gateway_admin.calls(rollout_id)] == [
        None, first.id, final.id]


def test_an_unknown_or_another_rollouts_response_id_is_a_400_naming_it(rollout, gateway_admin):
    rollout_id, client = rollout
    (other,) = create_rollouts(gateway_admin)
    with openai.OpenAI(base_url=other.base_url, api_key=other.api_key, max_retries=0) as other_client:
        theirs = other_client.responses.create(model="policy", input="hi").id
    for unknown in ("resp_nope", theirs):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="policy", previous_response_id=unknown, input="hi")
        assert unknown in caught.value.body["message"] and caught.value.body["type"] == "invalid_request_error"
    assert gateway_admin.calls(rollout_id) == []


def test_refusals_reach_the_sdk_as_bad_requests_naming_the_field(rollout, gateway_admin):
    rollout_id, client = rollout
    image = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="policy", input=image)
    assert "input[0].content[0]" in caught.value.body["message"] and "text only" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="policy", input="hi", extra_body={"seed": 1})
    assert "'seed'" in caught.value.body["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_chat_completions_with_tools(rollout, upstream, gateway_admin, stream):
    rollout_id, client = rollout
    messages = [{"role": "user", "content": "fix a.py"}]
    if stream:
        chunks = list(client.chat.completions.create(model="policy", messages=messages, tools=CHAT_TOOLS,
                                                     stream=True))
        pieces = [c for chunk in chunks for choice in chunk.choices for c in choice.delta.tool_calls or ()]
        names = [p.function.name for p in pieces if p.function.name]
        arguments = ["".join(p.function.arguments or "" for p in pieces if p.index == i) for i in (0, 1)]
        ids = [p.id for p in pieces if p.id]
    else:
        message = client.chat.completions.create(model="policy", messages=messages, tools=CHAT_TOOLS).choices[0]
        names = [c.function.name for c in message.message.tool_calls]
        arguments = [c.function.arguments for c in message.message.tool_calls]
        ids = [c.id for c in message.message.tool_calls]
    assert (names, arguments) == (["read_file", "run"], ['{"step": 0}', '{"step": 1}'])
    results = [{"role": "tool", "tool_call_id": ident, "content": "ok"} for ident in ids]
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"id": ident, "type": "function", "function": {"name": n, "arguments": a}}
        for ident, n, a in zip(ids, names, arguments, strict=True)]}
    answer = client.chat.completions.create(model="policy", messages=[*messages, assistant, *results],
                                            tools=CHAT_TOOLS)
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].message.content
    recorded = gateway_admin.calls(rollout_id)
    assert [c.kind for c in recorded] == ["chat", "chat"]
    assert recorded[0].prompt_token_ids == list(range(1000, 1000 + PROMPT_TOKENS))
