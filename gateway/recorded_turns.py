"""Recorded turns: the engine sees the tokens the policy produced for an assistant turn a harness sends back.

A harness re-sends each earlier answer as part of its history, re-serialised its own way: Claude Code adds a
defaulted argument to every earlier `Edit` call (`replace_all: false`), others reorder keys or trim text. Rendered by
the chat template, such a history no longer extends the tokens the engine consumed and sampled before, so the
trainer starts a new sample at every such turn, and the policy is trained on a context it never produced. With
`recorded_turns` on (gateway config; the CLI recipes' runs), a translated call whose history continues an earlier
call of the same rollout attempt goes to the engine with the recorded tokens in place of the re-rendered ones:

- Match (pure, `matched_call`): the latest ok main call of the attempt's last `MAX_CANDIDATES` of its protocol whose
  request translates to exactly this call's first messages (its assistant turns compared as below) with the same
  tools, and whose answer (the adapter's `answer_turn`) is the next message: the same text (up to surrounding
  whitespace), the same tool calls in order (id, name, and arguments equal as JSON values, once the keys the re-sent
  call adds with the value its tool's schema declares as `default` are dropped). Anything else sent differently
  (a tool result, a system prompt, the tools) is no match: the engine then renders the history as sent.
- Splice (`spliced`): the engine's own tokenizer (`POST /tokenize`) renders that call's messages (A: with the
  generation prompt; B: closed by its answer's turn) and this call's (C: its messages with the answer's turn as
  recorded); when B extends A and C extends B, the prompt is the earlier call's recorded prompt and answer tokens,
  then what the template writes after the answer's end-of-turn token (its last, found once in it and closing the
  message before it in A the same way; at most `MAX_BRIDGE_TOKENS`), then C after B. An answer cut at the length
  limit has no end-of-turn token (`spliced_cut`): after its tokens comes the template's whole closing of a turn, as
  the engine renders an empty assistant turn after A (D), when B ends with that closing and the message before the
  answer is closed by it in A. An answer ended by the harness's stop strings is never continued. Every substituted
  token is one the engine consumed or sampled for this rollout attempt, and the rest is the engine's rendering of
  what the harness sent: no harness can put tokens in the policy's mouth.
- Not for a call whose `tool_choice` forces a call (the engines plan the forced opening on their own rendering).
- The engine gets them as vLLM's chat completions take a pre-tokenized prompt (`kv_transfer_params.
  prompt_token_ids`, vLLM 0.32; the embedded engine too), with the messages it would have rendered. The call is
  recorded with `recorded_prefix`: how many prompt tokens came from the records when the engine's reported prompt
  is the one sent (0 when an engine rendered the messages instead; None when nothing was substituted).

Its cost, only when on, for a call holding an earlier answer: the attempt's last `MAX_CANDIDATES` ok main calls of
its protocol read (one indexed query, `Store.recent_calls`), and three `/tokenize` calls of the engine (four after a
cut answer), together,
inside the pause gate (a paused gateway holds them as it holds the call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.capture import ProtocolError
from gateway.context import GatewayContext
from gateway.continuation import earlier_conversation
from gateway.errors import GatewayError
from gateway.protocols.base import ProtocolAdapter
from gateway.proxy import answer_charge, charge_parse
from gateway.records import CallRecord, CallStatus, ModelRecord
from gateway.request_bytes import Held
from gateway.upstream import AnswerRefused, UpstreamFailed

MAX_CANDIDATES = 8  # the attempt's last ok main calls of the protocol tried, latest first
CANDIDATE_GROWTH, CANDIDATE_SLACK_BYTES = 2, 64 * 1024
"""The longest earlier request a call is compared with: twice its own body and 64 KiB (a harness that re-sends a
conversation sends it whole, re-serialised a little longer at most)."""
MAX_BRIDGE_TOKENS = 4  # what a template writes after an answer's end-of-turn token (ChatML: a newline)
ENDED = frozenset({"stop", "tool_calls"})  # an answer that ended on its own (its last token closes the turn)
CUT = "length"  # an answer cut at the length limit (no end-of-turn token: the template's closing follows it)
CONTINUED = ENDED | {CUT}  # the finish reasons of the answers a later call may continue on their recorded tokens
EMPTY_TURN = {"role": "assistant", "content": ""}  # rendered after the opened messages: the template's closing
STOP_FIELDS = ("stop", "stop_sequences")  # a harness's stop strings: an answer they ended has no end-of-turn token
TOKENIZE_PATH = "/tokenize"


@dataclass(frozen=True)
class RecordedPrompt:
    """What the engine gets for a call whose history continues a recorded one."""

    messages: list[dict[str, Any]]  # the call's messages, the re-sent turn as the earlier answer was
    prompt_token_ids: list[int]  # the earlier call's prompt and answer, the template's bridge, the rest rendered
    recorded_tokens: int  # of which from the record (the earlier call's prompt and answer)


@dataclass(frozen=True)
class Match:
    """The earlier call a history continues."""

    call: CallRecord
    messages: list[dict[str, Any]]  # its messages as sent to the engine
    answer: dict[str, Any]  # its answer's assistant message


def _schemas(tools: Sequence[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Each function's parameter properties, by name."""
    found = {}
    for tool in tools or ():
        function = tool.get("function") or {}
        properties = (function.get("parameters") or {}).get("properties")
        found[function.get("name")] = properties if isinstance(properties, dict) else {}
    return found


def same_arguments(sent: str, recorded: str, properties: dict[str, Any]) -> bool:
    """Whether re-sent tool-call arguments are the recorded ones: equal JSON values, once the keys the re-sent call
    adds with their schema's `default` value are dropped."""
    if sent == recorded:
        return True
    try:
        again, original = orjson.loads(sent), orjson.loads(recorded)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(again, dict) or not isinstance(original, dict):
        return again == original
    for key in set(again) - set(original):
        schema = properties.get(key)
        if not isinstance(schema, dict) or "default" not in schema or schema["default"] != again[key]:
            return False
    return all(key in again and again[key] == value for key, value in original.items())


def same_turn(sent: dict[str, Any], recorded: dict[str, Any], properties: dict[str, dict[str, Any]]) -> bool:
    """Whether a re-sent message is the recorded one: same role, text up to surrounding whitespace, the same tool
    calls in order (`same_arguments`); a message that is not the assistant's must be equal."""
    if sent.get("role") != recorded.get("role"):
        return False
    if sent.get("role") != "assistant":
        return sent == recorded
    if str(sent.get("content") or "").strip() != str(recorded.get("content") or "").strip():
        return False
    calls, answered = sent.get("tool_calls") or [], recorded.get("tool_calls") or []
    if len(calls) != len(answered):
        return False
    for call, original in zip(calls, answered, strict=True):
        function, recorded_function = call.get("function") or {}, original.get("function") or {}
        if call.get("id") != original.get("id") or function.get("name") != recorded_function.get("name"):
            return False
        if not same_arguments(function.get("arguments") or "", recorded_function.get("arguments") or "",
                              properties.get(function.get("name"), {})):
            return False
    return True


def continues(chat: dict[str, Any], earlier: dict[str, Any], answer: dict[str, Any]) -> bool:
    """Whether `chat` is `earlier`'s conversation (same tools), its answer `answer`, then more."""
    messages, before = chat["messages"], earlier["messages"]
    if chat.get("tools") != earlier.get("tools") or len(messages) <= len(before) + 1:
        return False
    properties = _schemas(chat.get("tools"))
    turns = zip(messages[:len(before) + 1], [*before, answer], strict=True)
    return all(same_turn(sent, recorded, properties) for sent, recorded in turns)


def candidates(latest: Sequence[CallRecord], kind: str) -> list[CallRecord]:
    """Of the attempt's last calls (latest first), the main calls of `kind` that may be continued: ok, answered with
    tokens, ended on their own (by the model's end-of-turn token) or cut at the length limit, no stop strings asked
    for (an answer they ended lacks tokens it sampled)."""
    return [call for call in latest[:MAX_CANDIDATES] if call.kind == kind and not call.side
            and call.status == CallStatus.OK and call.response_token_ids and call.finish_reason in CONTINUED
            and not any(call.request.get(key) for key in STOP_FIELDS)]


def spliced(prompt: Sequence[int], answer: Sequence[int], opened: Sequence[int], closed: Sequence[int],
            whole: Sequence[int]) -> list[int] | None:
    """The prompt of a call that continues a recorded one, or None where the renderings do not line up.

    `prompt`, `answer`: the earlier call's recorded tokens (the answer ending with its end-of-turn token, found nowhere
    else in it); `opened`: its messages rendered with the generation prompt; `closed`: the same closed by its answer's
    turn; `whole`: this call's messages, that answer's turn as recorded."""
    if not answer or not _extends(closed, opened) or not _extends(whole, closed):
        return None
    turn = list(closed[len(opened):])
    end = answer[-1]
    if end not in turn or end in answer[:-1]:
        return None
    after = len(turn) - 1 - turn[::-1].index(end)
    bridge = turn[after + 1:]
    if len(bridge) > MAX_BRIDGE_TOKENS or not _closes_turns(end, bridge, opened):
        return None
    return [*prompt, *answer, *bridge, *whole[len(closed):]]


def spliced_cut(prompt: Sequence[int], answer: Sequence[int], opened: Sequence[int], closed: Sequence[int],
                whole: Sequence[int], empty: Sequence[int]) -> list[int] | None:
    """The prompt of a call that continues a recorded answer cut at the length limit, or None where the renderings
    do not line up: the earlier call's recorded prompt and answer, the template's closing of a turn (what it renders
    for an empty assistant turn after its generation prompt: `empty` past `opened`; the answer's turn in `closed`
    ends with it, the message before the answer is closed by it, and its first token, the end-of-turn one, is not in
    the answer and found once in the turn), then the rest as rendered. The other arguments are those of `spliced`."""
    if not answer or not (_extends(empty, opened) and _extends(closed, opened) and _extends(whole, closed)):
        return None
    closing = list(empty[len(opened):])
    if not 1 <= len(closing) <= MAX_BRIDGE_TOKENS + 1 or len(closed) - len(opened) <= len(closing) \
            or list(closed[len(closed) - len(closing):]) != closing:
        return None
    if closing[0] in answer or list(closed[len(opened):]).count(closing[0]) != 1 \
            or not _closes_turns(closing[0], closing[1:], opened):
        return None  # the end-of-turn token once in the turn, at its end (not what a template writes at its head)
    return [*prompt, *answer, *closing, *whole[len(closed):]]


def _extends(longer: Sequence[int], shorter: Sequence[int]) -> bool:
    """Whether `longer` starts with `shorter`."""
    return list(longer[:len(shorter)]) == list(shorter)


def _closes_turns(end: int, bridge: list[int], opened: Sequence[int]) -> bool:
    """Whether `end` then `bridge` is how the template closes a message: as it closed the last one before the
    answer (an answer's last token that is content, not an end-of-turn token, is not found closing that message)."""
    if end not in opened:
        return False
    before = len(opened) - 1 - list(opened)[::-1].index(end)
    return list(opened[before + 1:before + 1 + len(bridge)]) == bridge


async def _messages_of(svc: GatewayContext, adapter: ProtocolAdapter, call: CallRecord,
                       held: Held) -> dict[str, Any] | None:
    """The chat request an earlier call went to the engine as (its messages and tools), or None (a conversation it
    continued that `held` has no room for among them)."""
    try:
        earlier = await earlier_conversation(svc, adapter, call.request, call.rollout_id, call.attempt, held)
        return adapter.to_chat(call.request, earlier.turns)
    except (GatewayError, ValueError, KeyError, TypeError):
        return None


async def matched_call(svc: GatewayContext, adapter: ProtocolAdapter, chat: dict[str, Any],
                       latest: list[CallRecord], held: Held) -> Match | None:
    """The latest earlier call whose conversation and answer `chat` continues (`continues`), or None."""
    for call in candidates(latest, adapter.kind):
        try:
            answer = adapter.answer_turn(call.response_raw or "")
        except (ValueError, KeyError, TypeError, IndexError, GatewayError):
            continue
        earlier = await _messages_of(svc, adapter, call, held) if answer is not None else None
        if earlier is not None and continues(chat, earlier, answer):
            return Match(call, earlier["messages"], answer)
    return None


async def _tokenize(svc: GatewayContext, endpoint: ModelRecord, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None, generation_prompt: bool, held: Held) -> list[int] | None:
    """The engine's tokens of `messages` rendered with its chat template, charged to the call's request as they
    arrive and before they are parsed (a refusal, or any failure: None)."""
    request: dict[str, Any] = {"model": endpoint.served_name, "messages": messages,
                               "add_generation_prompt": generation_prompt}
    if tools:
        request["tools"] = tools
    url = endpoint.base_url.rstrip("/").removesuffix("/v1") + TOKENIZE_PATH
    try:
        status, _, payload = await svc.upstream.request(url, orjson.dumps(request), answer_charge(held))
        charge_parse(held, payload)
        tokens = orjson.loads(payload).get("tokens") if status == 200 else None
    except (UpstreamFailed, AnswerRefused, orjson.JSONDecodeError, AttributeError, ProtocolError):
        return None
    return tokens if isinstance(tokens, list) and all(type(t) is int for t in tokens) else None


async def recorded_prompt(svc: GatewayContext, adapter: ProtocolAdapter, chat: dict[str, Any], rollout_id: str,
                          attempt: int, endpoint: ModelRecord, held: Held, body_bytes: int) -> RecordedPrompt | None:
    """The recorded prompt of a translated call whose history continues an earlier call of this attempt, or None
    (no such call, renderings that do not line up, an engine that cannot tokenize: the engine renders as sent).
    The earlier calls it compares are charged to the call's request `held` before they are built (a refusal is no
    recorded prompt), and only those whose request was at most `CANDIDATE_GROWTH` times this call's body (of
    `body_bytes`, plus `CANDIDATE_SLACK_BYTES`) are read: a conversation grows, and a small call makes the gateway
    read no large one."""
    if chat.get("tool_choice") not in (None, "auto", "none") or \
            not any(message.get("role") == "assistant" for message in chat["messages"][1:-1]):
        return None  # a forced call (its opening is planned on the engine's rendering), or no answer to continue
    try:
        latest = await svc.history_store.recent_calls(
            rollout_id, attempt, adapter.kind, MAX_CANDIDATES,
            max_request_bytes=CANDIDATE_GROWTH * body_bytes + CANDIDATE_SLACK_BYTES,
            admit=lambda size: held.add(size, "reading the earlier calls this one may continue"))
    except GatewayError:
        return None
    match = await matched_call(svc, adapter, chat, latest, held)
    if match is None:
        return None
    k = len(match.messages)
    messages = [*match.messages, match.answer, *chat["messages"][k + 1:]]
    earlier = match.call
    cut = earlier.finish_reason == CUT
    renderings = [(match.messages, True), ([*match.messages, match.answer], False), (messages, True),
                  *([([*match.messages, EMPTY_TURN], False)] if cut else [])]
    async with svc.gate.admit():
        rendered = await asyncio.gather(*(_tokenize(svc, endpoint, turns, chat.get("tools"), generation_prompt, held)
                                          for turns, generation_prompt in renderings))
    if any(tokens is None for tokens in rendered):
        return None
    splice = spliced_cut if cut else spliced
    prompt = splice(earlier.prompt_token_ids, earlier.response_token_ids, *rendered)
    recorded = len(earlier.prompt_token_ids) + len(earlier.response_token_ids)
    return None if prompt is None else RecordedPrompt(messages, prompt, recorded)


def with_recorded(chat: dict[str, Any], recorded: RecordedPrompt | None) -> dict[str, Any]:
    """The chat request the engine gets: as it was, or with the recorded prompt (vLLM's pre-tokenized prompt)."""
    if recorded is None:
        return chat
    return {**chat, "messages": recorded.messages,
            "kv_transfer_params": {"prompt_token_ids": recorded.prompt_token_ids}}
