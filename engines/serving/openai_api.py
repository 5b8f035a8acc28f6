"""The OpenAI-compatible routes: /v1/models, /v1/chat/completions and /v1/completions (vLLM's shapes).

Chat answers parse Hermes tool calls when the request has tools (tool_parser.py, chat_stream.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from engines.serving import responses as shapes
from engines.serving.bridge import GenerationFailed, PromptGeneration
from engines.serving.chat_stream import ChatStreamAssembler
from engines.serving.chat_template import ChatTemplateError, render_chat
from engines.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    RequestError,
    generation_params,
)
from engines.serving.state import EngineState, engine_state
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


def chat_prompt_ids(state: EngineState, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    add_generation_prompt: bool, continue_final_message: bool,
                    template_kwargs: dict[str, Any] | None) -> list[int]:
    """Renders a conversation (chat_template.py decides the template) and tokenises it without extra special
    tokens; shared by chat completions and /tokenize so both count the same tokens."""
    tokenizer = state.holder.tokenizer
    try:
        rendered = render_chat(tokenizer, messages, tools, add_generation_prompt, continue_final_message,
                               template_kwargs)
    except ChatTemplateError as exc:
        raise RequestError(str(exc), param=exc.param) from exc
    return list(tokenizer(rendered.text, add_special_tokens=False)["input_ids"])


def _chat_prompt(state: EngineState, body: ChatCompletionRequest) -> list[int]:
    return chat_prompt_ids(state, body.messages, body.tools, body.add_generation_prompt,
                           body.continue_final_message, body.chat_template_kwargs)


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
    prompt_ids = _chat_prompt(state, body)
    top_k = body.top_logprobs or 0
    params = generation_params(body, body.max_completion_tokens or body.max_tokens, len(prompt_ids),
                               state.holder.max_model_len, top_k, "messages")
    generation = await _start(state, [prompt_ids], params)
    meta = shapes.ResponseMeta(shapes.new_id("chatcmpl"), state.served_model_name, generation.policy_version)
    if body.stream:
        return _streaming(_chat_stream(state, body, generation, meta, prompt_ids), meta.policy_version)
    choices = await _collect(generation, body.n)
    parsed = [parse_tool_calls(c.text) for c in choices] if body.parses_tool_calls else None
    state.count_tool_call_parse_failures(sum(p.parse_failures for p in parsed or ()))
    return json_response(shapes.chat_body(meta, choices, prompt_ids, state.token_text, body.logprobs,
                                          body.return_token_ids, parsed), meta.policy_version)


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
                 meta: shapes.ResponseMeta, prompt_ids: list[int]) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(body.n):
            yield sse(shapes.chat_role_chunk(meta, index, prompt_ids if body.return_token_ids else None))
        completion_tokens = 0
        assembler = ChatStreamAssembler(meta, body.n, state.token_text, body.logprobs, body.return_token_ids,
                                        body.parses_tool_calls)
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
