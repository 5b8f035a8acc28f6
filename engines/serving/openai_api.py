"""The OpenAI-compatible routes: /v1/models, /v1/chat/completions and /v1/completions (vLLM's shapes).

Chat answers parse Hermes tool calls when the request has tools (tool_parser.py, chat_stream.py); `tool_choice`
required or a named function forces the call's opening into the prompt (tool_choice.py, forced_call.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from engines.serving import responses as shapes
from engines.serving.bridge import GenerationFailed, PromptGeneration
from engines.serving.chat_stream import ChatStreamAssembler
from engines.serving.chat_template import ChatTemplateError, RenderedChat, render_chat
from engines.serving.forced_call import ForcedCall, ForcingError, function_openings, plan_forced_call
from engines.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    RequestError,
    generation_params,
)
from engines.serving.state import EngineState, engine_state
from engines.serving.tool_choice import ToolChoice, ToolChoiceError, read_tool_choice
from engines.serving.tool_parser import parse_tool_calls

router = APIRouter()
POLICY_VERSION_HEADER = "X-Policy-Version"


def json_response(body: dict[str, Any], policy_version: int, status_code: int = 200) -> Response:
    """A JSON response carrying the policy version header."""
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json",
                    headers={POLICY_VERSION_HEADER: str(policy_version)})


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


@router.get("/v1/models")
async def list_models(state: EngineState = Depends(engine_state)) -> Response:
    """The single served model."""
    card = {"id": state.served_model_name, "object": "model", "created": 0, "owned_by": "harnessrl",
            "root": str(state.holder.model_dir), "parent": None, "max_model_len": state.holder.max_model_len}
    return json_response({"object": "list", "data": [card]}, state.holder.policy_version)


def _rendered(state: EngineState, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              add_generation_prompt: bool, continue_final_message: bool,
              template_kwargs: dict[str, Any] | None) -> RenderedChat:
    try:
        return render_chat(state.holder.tokenizer, messages, tools, add_generation_prompt, continue_final_message,
                           template_kwargs)
    except ChatTemplateError as exc:
        raise RequestError(str(exc), param=exc.param) from exc


def _encode(state: EngineState, text: str) -> list[int]:
    return list(state.holder.tokenizer(text, add_special_tokens=False)["input_ids"])


def chat_prompt_ids(state: EngineState, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    add_generation_prompt: bool, continue_final_message: bool,
                    template_kwargs: dict[str, Any] | None) -> list[int]:
    """Renders a conversation (chat_template.py decides the template) and tokenises it without extra special
    tokens; shared by chat completions and /tokenize so both count the same tokens."""
    rendered = _rendered(state, messages, tools, add_generation_prompt, continue_final_message, template_kwargs)
    return _encode(state, rendered.text)


def _tool_choice(body: ChatCompletionRequest) -> ToolChoice:
    try:
        return read_tool_choice(body.tool_choice, body.tools)
    except ToolChoiceError as exc:
        raise RequestError(str(exc), param=exc.param) from exc


def _forced_call(state: EngineState, body: ChatCompletionRequest, choice: ToolChoice, rendered: RenderedChat,
                 prompt_ids: list[int]) -> ForcedCall:
    if body.continue_final_message or not body.add_generation_prompt:
        raise RequestError(f"tool_choice={body.tool_choice!r} starts a new assistant answer with a tool call, so it "
                           "needs add_generation_prompt=true and continue_final_message=false; drop those fields or "
                           "use tool_choice 'auto'", param="tool_choice")
    decode = state.holder.tokenizer.decode
    try:
        return plan_forced_call(lambda text: _encode(state, text), lambda ids: decode(ids, skip_special_tokens=False),
                                rendered.text, prompt_ids, choice.names, function_openings(body.tools, choice.names))
    except ForcingError as exc:
        raise RequestError(str(exc), param="tool_choice") from exc


def _given_prompt(state: EngineState, body: ChatCompletionRequest) -> list[int] | None:
    """vLLM's pre-tokenized chat prompt (`kv_transfer_params.prompt_token_ids`), checked; None when not given."""
    given = (body.kv_transfer_params or {}).get("prompt_token_ids")
    if given is None:
        return None
    vocab = state.holder.config.vocab_size
    if not isinstance(given, list) or not given or any(type(t) is not int or not 0 <= t < vocab for t in given):
        raise RequestError(f"kv_transfer_params.prompt_token_ids must be a non-empty list of token ids in [0, {vocab})",
                           param="kv_transfer_params.prompt_token_ids")
    return given


def _chat_prompt(state: EngineState, body: ChatCompletionRequest,
                 choice: ToolChoice) -> tuple[list[int], ForcedCall | None]:
    """The prompt the engine generates from, and the forced call when `tool_choice` forces one."""
    given = _given_prompt(state, body)
    if given is not None and not choice.forces_call:
        return given, None
    rendered = _rendered(state, body.messages, body.tools, body.add_generation_prompt, body.continue_final_message,
                         body.chat_template_kwargs)
    prompt_ids = _encode(state, rendered.text)
    if not choice.forces_call:
        return prompt_ids, None
    forced = _forced_call(state, body, choice, rendered, prompt_ids)
    return list(forced.prompt_ids), forced


async def _start(state: EngineState, prompts_ids: list[list[int]], params) -> PromptGeneration:
    generation = PromptGeneration(state.scheduler, prompts_ids, params)
    try:
        await generation.admitted()
    except BaseException:
        generation.cancel()
        raise
    return generation


async def _collect(generation: PromptGeneration, count: int) -> list[shapes.ChoiceLog]:
    choices = [shapes.ChoiceLog() for _ in range(count)]
    try:
        async for index, event in generation.events():
            choices[index].add(event)
    finally:
        generation.cancel()
    return choices


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest,
                           state: EngineState = Depends(engine_state)) -> Response:
    """Chat completion, streamed or not."""
    state.check_model_name(body.model)
    choice = _tool_choice(body)
    prompt_ids, forced = _chat_prompt(state, body, choice)
    top_k = body.top_logprobs or 0
    params = generation_params(body, body.max_completion_tokens or body.max_tokens, len(prompt_ids),
                               state.holder.max_model_len, top_k, "messages")
    if forced is not None:
        params = replace(params, continuations=forced.continuations)
    generation = await _start(state, [prompt_ids], params)
    meta = shapes.ResponseMeta(shapes.new_id("chatcmpl"), state.served_model_name, generation.policy_version)
    if body.stream:
        return _streaming(_chat_stream(state, body, generation, meta, prompt_ids, choice, forced),
                          meta.policy_version)
    choices = await _collect(generation, body.n)
    forced_text, forced_names = (forced.forced_text, forced.names) if forced is not None else ("", ())
    parsed = [parse_tool_calls(forced_text + c.text, forced_names=forced_names)
              for c in choices] if choice.parses_calls else None
    state.count_tool_call_parse_failures(sum(p.parse_failures for p in parsed or ()))
    return json_response(shapes.chat_body(meta, choices, prompt_ids, state.token_text, body.logprobs,
                                          body.return_token_ids, parsed, choice,
                                          forced.forced_tokens if forced is not None else 0), meta.policy_version)


def _streaming(chunks: AsyncIterator[bytes], policy_version: int) -> StreamingResponse:
    headers = {POLICY_VERSION_HEADER: str(policy_version), "Cache-Control": "no-cache"}
    return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)


async def _guarded_stream(chunks: AsyncIterator[bytes], generation: PromptGeneration) -> AsyncIterator[bytes]:
    """Ends every stream with [DONE], reports engine failures in-band, cancels generation on disconnect."""
    try:
        async for chunk in chunks:
            yield chunk
        yield SSE_DONE
    except GenerationFailed as exc:
        yield sse(RequestError(str(exc), status_code=500, error_type="internal_server_error").body())
        yield SSE_DONE
    finally:
        generation.cancel()


def _chat_stream(state: EngineState, body: ChatCompletionRequest, generation: PromptGeneration,
                 meta: shapes.ResponseMeta, prompt_ids: list[int], choice: ToolChoice,
                 forced: ForcedCall | None) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        forced_tokens = forced.forced_tokens if forced is not None else None
        for index in range(body.n):
            yield sse(shapes.chat_role_chunk(meta, index, prompt_ids if body.return_token_ids else None,
                                             forced_tokens))
        completion_tokens = 0
        assembler = ChatStreamAssembler(meta, body.n, state.token_text, body.logprobs, body.return_token_ids,
                                        choice.parses_calls, tool_choice=choice,
                                        forced_text=forced.forced_text if forced is not None else "")
        try:
            async for index, event in generation.events():
                completion_tokens += 1
                yield sse(assembler.token_chunk(index, event))
        finally:
            state.count_tool_call_parse_failures(assembler.parse_failures)
        if body.stream_options and body.stream_options.include_usage:
            yield sse(shapes.usage_chunk(meta, "chat.completion.chunk", len(prompt_ids), completion_tokens))
    return _guarded_stream(chunks(), generation)


def _completion_prompts(state: EngineState, body: CompletionRequest) -> list[list[int]]:
    if body.echo:
        raise RequestError("echo=true is not supported by the embedded engine; drop it", param="echo")
    vocab = state.holder.config.vocab_size
    prompts_ids = []
    for prompt in body.prompt_list():
        if isinstance(prompt, str):
            prompts_ids.append(list(state.holder.tokenizer(prompt)["input_ids"]))
            continue
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise RequestError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab})",
                               param="prompt")
        prompts_ids.append(list(prompt))
    if any(not ids for ids in prompts_ids):
        raise RequestError("a prompt is empty; every prompt needs at least one token", param="prompt")
    return prompts_ids


@router.post("/v1/completions")
async def completions(body: CompletionRequest, state: EngineState = Depends(engine_state)) -> Response:
    """Text completion over text or token-id prompts, streamed or not."""
    state.check_model_name(body.model)
    prompts_ids = _completion_prompts(state, body)
    with_logprobs = body.logprobs is not None
    longest = max(len(ids) for ids in prompts_ids)
    params = generation_params(body, body.max_tokens, longest, state.holder.max_model_len, body.logprobs or 0,
                               "prompt")
    generation = await _start(state, prompts_ids, params)
    meta = shapes.ResponseMeta(shapes.new_id("cmpl"), state.served_model_name, generation.policy_version)
    if body.stream:
        return _streaming(_completion_stream(state, body, generation, meta, prompts_ids), meta.policy_version)
    choices = await _collect(generation, len(prompts_ids) * body.n)
    return json_response(shapes.completion_body(meta, choices, prompts_ids, body.n, state.token_text,
                                                with_logprobs, body.return_token_ids), meta.policy_version)


def _completion_stream(state: EngineState, body: CompletionRequest, generation: PromptGeneration,
                       meta: shapes.ResponseMeta, prompts_ids: list[list[int]]) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        offsets: dict[int, int] = {}
        completion_tokens = 0
        async for index, event in generation.events():
            first = index not in offsets
            offset = offsets.get(index, 0)
            offsets[index] = offset + len(state.token_text(event.token_id))
            completion_tokens += 1
            prompt_ids = prompts_ids[index // body.n] if first and body.return_token_ids else None
            yield sse(shapes.completion_token_chunk(
                meta, index, event, state.token_text, offset, body.logprobs is not None, prompt_ids,
                body.return_token_ids))
        if body.stream_options and body.stream_options.include_usage:
            prompt_tokens = sum(len(p) for p in prompts_ids)
            yield sse(shapes.usage_chunk(meta, "text_completion", prompt_tokens, completion_tokens))
    return _guarded_stream(chunks(), generation)
