"""POST /tokenize in vLLM's shape: a chat rendered exactly as /v1/chat/completions renders it, or a text prompt
tokenised as /v1/completions does; the gateway counts tokens with it (Anthropic's count_tokens)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from engines.serving.openai_api import chat_prompt_ids, json_response
from engines.serving.protocol import TokenizeRequest
from engines.serving.state import EngineState, engine_state

router = APIRouter()


def tokenize_ids(state: EngineState, body: TokenizeRequest) -> list[int]:
    """The token ids a chat or text completion of the same input would start from."""
    if body.messages is not None:
        return chat_prompt_ids(state, body.messages, body.tools, body.add_generation_prompt,
                               body.continue_final_message, body.chat_template_kwargs)
    return list(state.holder.tokenizer(body.prompt or "", add_special_tokens=body.add_special_tokens)["input_ids"])


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, state: EngineState = Depends(engine_state)) -> Response:
    """{count, max_model_len, tokens}."""
    state.check_model_name(body.model)
    tokens = tokenize_ids(state, body)
    return json_response({"count": len(tokens), "max_model_len": state.holder.max_model_len, "tokens": tokens},
                         state.holder.policy_version)
