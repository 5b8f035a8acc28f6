"""The OpenAI-compatible routes: /v1/models, /v1/chat/completions and /v1/completions (vLLM's shapes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from engines.serving import responses as shapes
from engines.serving.bridge import GenerationFailed, PromptGeneration
from engines.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    RequestError,
    generation_params,
)
from engines.serving.state import EngineState, engine_state

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


def _message_text(message: dict[str, Any]) -> dict[str, Any]:
    """Flattens list-of-parts content into text, as chat templates expect strings."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise RequestError(f"message content part {part!r} is not supported; send text parts only",
                               param="messages")
        texts.append(part.get("text", ""))
    return {**message, "content": "".join(texts)}


def render_chat(state: EngineState, body: ChatCompletionRequest) -> list[int]:
    """Applies the chat template (with tools) and tokenises the text without extra special tokens."""
    tokenizer = state.holder.tokenizer
    try:
        text = tokenizer.apply_chat_template(
            [_message_text(m) for m in body.messages], tools=body.tools, tokenize=False,
            add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
            continue_final_message=body.continue_final_message, **(body.chat_template_kwargs or {}))
    except RequestError:
        raise
    except Exception as exc:  # noqa: BLE001 - template errors are the caller's messages
        raise RequestError(f"the chat template could not render these messages: {exc}",
                           param="messages") from exc
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


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
    prompt_ids = render_chat(state, body)
    top_k = body.top_logprobs or 0
    params = generation_params(body, body.max_completion_tokens or body.max_tokens, len(prompt_ids),
                               state.holder.max_model_len, top_k, "messages")
    generation = await _start(state, [prompt_ids], params)
    meta = shapes.ResponseMeta(shapes.new_id("chatcmpl"), state.served_model_name, generation.policy_version)
    if body.stream:
        return _streaming(_chat_stream(state, body, generation, meta, prompt_ids), meta.policy_version)
    choices = await _collect(generation, body.n)
    return json_response(shapes.chat_body(meta, choices, prompt_ids, state.token_text, body.logprobs,
                                          body.return_token_ids), meta.policy_version)


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
        async for index, event in generation.events():
            completion_tokens += 1
            yield sse(shapes.chat_token_chunk(meta, index, event, state.token_text, body.logprobs,
                                              body.return_token_ids))
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
