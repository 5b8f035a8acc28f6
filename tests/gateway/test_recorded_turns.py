"""Recorded turns through the in-process gateway (config `recorded_turns: true`) in front of an upstream that renders
ChatML one token per character (tests/recipes/cli_episode.py): a history re-sent with a defaulted argument added
continues on the earlier call's recorded tokens (one sample), while a history the harness changed otherwise, or an
assistant turn the policy never produced, is rendered as sent (no substitution)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.protocols.anthropic_answer import recorded_content
from tests.gateway.api_support import create_rollouts, current_key
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from tests.recipes.cli_episode import IM_END, Episode, EpisodeUpstream, ToolStep, encode
from trainer.recorded import to_recorded_call
from trainer.samples import build_samples

EDIT_ARGS = {"file_path": "/repo/a.py", "old_string": "x = 1", "new_string": "x = 2"}
TOOLS = [{"name": "Edit", "description": "Edit a file",
          "input_schema": {"type": "object", "required": ["file_path", "old_string", "new_string"],
                           "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"},
                                          "new_string": {"type": "string"},
                                          "replace_all": {"type": "boolean", "default": False}}}},
         {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}]
STEPS = [ToolStep("Edit", EDIT_ARGS), ToolStep("Bash", {"command": "pytest"})]
ASK = {"role": "user", "content": "fix a.py"}
PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"


@pytest.fixture(scope="module")
def upstream():
    served = EpisodeUpstream(Episode([]))
    yield served
    served.close()


@pytest.fixture(scope="module")
def admin(upstream, tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded-turns")
    (root / "gateway.yaml").write_text("recorded_turns: true\n")
    gateway = InProcessGateway(root / "gateway.db", root / "gateway.yaml").start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("policy", upstream.base_url)
        yield client
    gateway.stop()


@pytest.fixture(scope="module")
def plain(upstream, tmp_path_factory):
    """A gateway without recorded turns, in front of the same upstream."""
    root = tmp_path_factory.mktemp("rendered-turns")
    gateway = InProcessGateway(root / "gateway.db").start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("policy", upstream.base_url)
        yield client
    gateway.stop()


def play(upstream: EpisodeUpstream, steps: list[ToolStep]) -> None:
    upstream.episode.steps = steps
    upstream.episode.requests.clear()


def messages_call(created, messages: list[dict[str, Any]], *, stream: bool, **fields: Any) -> list[dict[str, Any]]:
    """One Messages call (as Claude Code sends it); the answer's content blocks."""
    body = {"model": "claude-opus-5-5", "max_tokens": 64, "stream": stream, "messages": messages, "tools": TOOLS,
            **fields}
    answer = httpx.post(created.base_url + "/messages", json=body, headers={"x-api-key": created.api_key}, timeout=30)
    assert answer.status_code == 200, answer.text
    return recorded_content(answer.content)


def result(call: dict[str, Any], text: str) -> dict[str, Any]:
    """The user turn answering the tool call `call` with `text`."""
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": text}]}


def samples_of(admin: GatewayClient, rollout_id: str) -> int:
    return build_samples([to_recorded_call(call, "g") for call in admin.calls(rollout_id)]).stats.samples


@pytest.mark.parametrize("stream", [True, False])
def test_an_edit_re_sent_with_its_default_argument_continues_on_the_recorded_tokens(admin, upstream, stream):
    play(upstream, STEPS)
    (created,) = create_rollouts(admin, prefix="turns")
    (edit,) = messages_call(created, [ASK], stream=stream)
    assert edit["input"] == EDIT_ARGS
    resent = {**edit, "input": {"replace_all": False, **edit["input"]}}  # as Claude Code re-sends it
    history = [ASK, {"role": "assistant", "content": [resent]}, result(edit, "ok")]
    (bash,) = messages_call(created, history, stream=stream)
    history += [{"role": "assistant", "content": [bash]}, result(bash, "1 passed")]
    messages_call(created, history, stream=stream)
    first, second, third = admin.calls(created.id)
    assert second.recorded_prefix == len(first.prompt_token_ids) + len(first.response_token_ids)
    assert third.recorded_prefix == len(second.prompt_token_ids) + len(second.response_token_ids)
    sent = upstream.episode.requests[1]
    assert sent["kv_transfer_params"]["prompt_token_ids"] == second.prompt_token_ids
    assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == EDIT_ARGS  # as recorded
    assert first.recorded_prefix is None and samples_of(admin, created.id) == 1


def test_a_history_changed_otherwise_or_a_forced_call_is_rendered_as_sent(admin, upstream):
    play(upstream, STEPS)
    (created,) = create_rollouts(admin, prefix="turns")
    (edit,) = messages_call(created, [ASK], stream=False)
    changed = [{"role": "user", "content": "fix a.py, and b.py too"}, {"role": "assistant", "content": [edit]},
               result(edit, "ok")]
    messages_call(created, changed, stream=False)
    forged = {**edit, "input": {**EDIT_ARGS, "new_string": "x = 3"}}  # a call the policy did not make
    messages_call(created, [ASK, {"role": "assistant", "content": [forged]}, result(edit, "ok")], stream=False)
    messages_call(created, [ASK, {"role": "assistant", "content": [edit]}, result(edit, "ok")], stream=False,
                  tool_choice={"type": "any"})  # a forced call: the engine plans its opening on its own rendering
    calls = admin.calls(created.id)
    assert [call.recorded_prefix for call in calls] == [None, None, None, None]
    assert all("kv_transfer_params" not in request for request in upstream.episode.requests)
    assert samples_of(admin, created.id) == 3  # the forced call, rendered as sent, happens to extend the first


@pytest.mark.parametrize("recorded", [True, False])
def test_text_written_after_a_forced_call_continues_on_the_recorded_tokens(admin, plain, upstream, recorded):
    """The calculator recipe's turn: the first call forced, the model writes text after its call; the answer holds the
    text block first (as Messages lays it out), the SDK sends it back so and the template renders text before calls:
    without recorded turns the next call opens a second sample, with them it continues the first."""
    play(upstream, [ToolStep("Bash", {"command": "echo 9065"}, after="The answer is coming.")])
    client = admin if recorded else plain
    (created,) = create_rollouts(client, prefix="after")
    content = messages_call(created, [ASK], stream=False, tool_choice={"type": "tool", "name": "Bash"})
    assert [block["type"] for block in content] == ["text", "tool_use"]
    call = content[1]
    messages_call(created, [ASK, {"role": "assistant", "content": content}, result(call, "9065")], stream=False)
    first, second = client.calls(created.id)
    assert first.sampling.forced_prompt_tokens > 0  # the opening was the prompt's, as the embedded engine reports it
    assert (second.recorded_prefix is not None) is recorded
    stats = build_samples([to_recorded_call(recorded_call, "g") for recorded_call in (first, second)]).stats
    assert (stats.samples, stats.calls_merged, stats.merge_failures) == ((1, 1, 0) if recorded else (2, 0, 1))
    assert stats.penalized_tokens_masked == 0


CALLED = '{"command": "echo 9065"}}\n</tool_call>\n'  # what the model writes of its forced call, then a newline


@pytest.mark.parametrize("recorded", [True, False])
def test_an_answer_cut_at_the_length_limit_continues_with_the_templates_closing(admin, plain, upstream, recorded):
    """The forced call, then text cut by `max_tokens` (no end-of-turn token sampled): with recorded turns the next
    call's prompt is the first call's prompt and answer, the template's closing of a turn (`<|im_end|>` and a newline,
    not sampled: not trained), then the tool's result; without them it opens a second sample."""
    play(upstream, [ToolStep("Bash", {"command": "echo 9065"}, after="The answer is coming, and more.")])
    client = admin if recorded else plain
    (created,) = create_rollouts(client, prefix="cut")
    content = messages_call(created, [ASK], stream=False, tool_choice={"type": "tool", "name": "Bash"},
                            max_tokens=len(CALLED) + len("The answer is"))
    assert [(block["type"], block.get("text")) for block in content] == [("text", "The answer is"), ("tool_use", None)]
    messages_call(created, [ASK, {"role": "assistant", "content": content}, result(content[1], "9065")], stream=False)
    first, second = client.calls(created.id)
    assert first.finish_reason == "length" and first.response_token_ids[-1] != IM_END
    recorded_tokens = len(first.prompt_token_ids) + len(first.response_token_ids)
    assert second.recorded_prefix == (recorded_tokens if recorded else None)
    if recorded:
        assert second.prompt_token_ids[:recorded_tokens] == first.prompt_token_ids + first.response_token_ids
        assert second.prompt_token_ids[recorded_tokens:recorded_tokens + 2] == [IM_END, *encode("\n")]
    stats = build_samples([to_recorded_call(recorded_call, "g") for recorded_call in (first, second)]).stats
    assert (stats.samples, stats.calls_merged, stats.merge_failures) == ((1, 1, 0) if recorded else (2, 0, 1))


def test_another_attempts_answer_is_never_substituted(admin, upstream):
    play(upstream, STEPS)
    (created,) = create_rollouts(admin, prefix="turns")
    (edit,) = messages_call(created, [ASK], stream=False)
    admin.claim("turns-controller", limit=1000)  # a new attempt: its key, its own calls
    assert admin.get_rollout(created.id).attempt == 1
    messages_call(current_key(admin, created.id), [ASK, {"role": "assistant", "content": [edit]}, result(edit, "ok")],
                  stream=False)
    (again,) = admin.calls(created.id, attempt=1)
    assert again.recorded_prefix is None and "kv_transfer_params" not in upstream.episode.requests[-1]


def responses_call(created, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    body = {"model": "gpt-5.5", "input": items, "tools": tools, "stream": False}
    answer = httpx.post(created.base_url + "/responses", json=body,
                        headers={"authorization": f"Bearer {created.api_key}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return orjson.loads(answer.content)["output"]


def test_a_custom_tool_call_sent_back_continues_on_the_recorded_tokens(admin, upstream):
    play(upstream, [ToolStep("apply_patch", {"input": PATCH}), ToolStep("exec_command", {"cmd": "pytest"})])
    tools = [{"type": "custom", "name": "apply_patch", "description": "Edit files",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
             {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    (created,) = create_rollouts(admin, prefix="turns")
    ask = {"type": "message", "role": "user", "content": "fix a.py"}
    (patch,) = responses_call(created, [ask], tools)
    assert (patch["type"], patch["input"]) == ("custom_tool_call", PATCH)
    responses_call(created, [ask, patch, {"type": "custom_tool_call_output", "call_id": patch["call_id"],
                                          "output": "Done!"}], tools)
    first, second = admin.calls(created.id)
    assert second.recorded_prefix == len(first.prompt_token_ids) + len(first.response_token_ids)
    assert samples_of(admin, created.id) == 1


def test_the_store_reads_only_the_attempts_last_ok_main_calls_of_the_protocol(tmp_path):
    import asyncio

    from gateway.records import RolloutSpec
    from gateway.store import SqlStore
    from tests.gateway.test_responses_chains import insert_rows, row

    async def main() -> list[int]:
        store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            await insert_rows(store, [row(seq, **fields) for seq, fields in enumerate(
                [{}, {}, {"status": "error"}, {"side": True}, {"kind": "messages"}, {"attempt": 1}, {},
                 {"recorded_prefix": 7}])])
            latest = await store.recent_calls("r", 0, "responses", 3)
            assert latest[0].recorded_prefix == 7
            return [call.seq for call in latest]
        finally:
            store.close()

    assert asyncio.run(main()) == [7, 6, 1]


def test_the_store_reads_only_candidates_within_the_size_asked_and_charges_them_before_building_them(tmp_path):
    import asyncio

    import pytest

    from gateway.errors import QuotaExceeded
    from gateway.records import RolloutSpec
    from gateway.store import SqlStore
    from gateway.strict_json import parse_bytes
    from tests.gateway.test_responses_chains import insert_rows, row

    requests = [b'{"input":"' + b"x" * size + b'"}' for size in (10, 5_000, 100)]

    async def main() -> tuple[list[int], list[int]]:
        store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            await insert_rows(store, [row(seq, request=body) for seq, body in enumerate(requests)])
            charged: list[int] = []
            latest = await store.recent_calls("r", 0, "responses", 8, max_request_bytes=1_000, admit=charged.append)

            def refuse(size: int) -> None:
                raise QuotaExceeded(f"no room for {size}")

            with pytest.raises(QuotaExceeded):
                await store.recent_calls("r", 0, "responses", 8, admit=refuse)
            return [call.seq for call in latest], charged
        finally:
            store.close()

    seqs, charged = asyncio.run(main())
    assert seqs == [2, 0]  # the 5,000-byte request is longer than asked: not read
    small = [requests[2], requests[0]]
    assert charged == [sum(len(body) + parse_bytes(body) + 4 * 2 for body in small)]  # + each answer, "{}" x 4
