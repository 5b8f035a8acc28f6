"""Request bodies of the OpenAI-compatible API (the subset vLLM accepts that matters for agents), and their
translation into generation parameters.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.serving.sampling import RowSampling
from engines.serving.scheduler import GenerationParams

MAX_TOP_LOGPROBS = 20
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


class RequestError(ValueError):
    """A request the engine refuses; rendered as an OpenAI-style error body."""

    def __init__(self, message: str, param: str | None = None, status_code: int = 400,
                 error_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status_code = status_code
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        """The JSON error body, in OpenAI's (and vLLM's) shape."""
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param,
                          "code": self.status_code}}


class StreamOptions(BaseModel):
    """Options of a streamed response."""

    include_usage: bool = False
    """Send a last chunk with token usage and no choices."""


class SamplingFields(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    """Served model name; other names are refused with 404."""
    temperature: float = Field(1.0, ge=0.0)
    """0 is greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = -1
    """Keep only the k most likely tokens; 0 or -1 disables (vLLM extension)."""
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    """Keep only tokens at least min_p times as likely as the most likely one; 0 disables (vLLM extension)."""
    max_tokens: int | None = Field(None, ge=1)
    """Most tokens to generate per choice."""
    stop: str | list[str] | None = None
    """Stop string(s); the text is cut before the first match."""
    stop_token_ids: list[int] | None = None
    """Token ids that end a choice (vLLM extension)."""
    seed: int | None = None
    """Per-request seed for reproducible sampling."""
    n: int = Field(1, ge=1, le=64)
    """Number of choices."""
    stream: bool = False
    """Answer as server-sent events."""
    stream_options: StreamOptions | None = None
    """Streaming options; only with stream=true."""
    return_token_ids: bool = False
    """Return prompt and completion token ids (vLLM extension)."""
    ignore_eos: bool = False
    """Do not stop at end-of-sequence (vLLM extension)."""
    include_stop_str_in_output: bool = False
    """Keep the matched stop string in the text (vLLM extension)."""

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options can only be set when stream=true")
        return self

    def stops(self) -> tuple[str, ...]:
        """Stop strings as a tuple."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(SamplingFields):
    """POST /v1/chat/completions."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    """Conversation so far, rendered by the model's chat template."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions, rendered by the model's chat template (or the fallback, see chat_template.py)."""
    tool_choice: Any = None
    """`auto` (the default), `none` (tool calls stay text), `required` or a named function
    (`{"type": "function", "function": {"name": ...}}`): the engine forces the call's opening (tool_choice.py)."""
    logprobs: bool = False
    """Return the sampled tokens' logprobs."""
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    """Alternatives per token; needs logprobs=true."""
    max_completion_tokens: int | None = Field(None, ge=1)
    """Newer name of max_tokens; wins when both are given."""
    add_generation_prompt: bool = True
    """End the rendered prompt with the assistant header."""
    continue_final_message: bool = False
    """Continue the last (assistant) message instead of starting a new one."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Extra variables for the chat template."""
    kv_transfer_params: dict[str, Any] | None = None
    """vLLM's: `prompt_token_ids` (non-empty, in the vocabulary) is the prompt, in place of the rendered `messages`
    (still read for the tools), as vLLM 0.32 takes a pre-tokenized chat prompt; other keys are ignored. Not with a
    `tool_choice` that forces a call: the forced opening is planned on the rendering, which is then used."""

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        return self


class CompletionRequest(SamplingFields):
    """POST /v1/completions."""

    prompt: str | list[int] | list[str] | list[list[int]]
    """Prompt text, token ids, or a list of either (one set of choices per prompt)."""
    max_tokens: int | None = Field(COMPLETIONS_DEFAULT_MAX_TOKENS, ge=1)
    """Most tokens to generate per choice (default 16, as OpenAI)."""
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    """Number of alternatives per token; any value returns the sampled tokens' logprobs."""
    echo: bool = False
    """Not supported (refused)."""

    def prompt_list(self) -> list[str | list[int]]:
        """The prompts as a list (a single prompt becomes a list of one)."""
        prompt = self.prompt
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
            return [prompt]
        if not prompt:
            raise RequestError("prompt is empty; pass text or a non-empty list of token ids", param="prompt")
        return list(prompt)


class TokenizeRequest(BaseModel):
    """POST /tokenize (vLLM's shape): either `messages` (rendered exactly as a chat completion) or `prompt`."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    """Served model name; other names are refused with 404."""
    messages: list[dict[str, Any]] | None = None
    """A conversation, rendered with the chat template as /v1/chat/completions would."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions rendered with `messages`."""
    add_generation_prompt: bool = True
    """End the rendered conversation with the assistant header."""
    continue_final_message: bool = False
    """Leave the last message open, as in a chat completion."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Extra variables for the chat template."""
    prompt: str | None = None
    """Plain text, tokenised as /v1/completions would."""
    add_special_tokens: bool = True
    """With `prompt`: add the tokenizer's special tokens (BOS), as completions do."""

    @model_validator(mode="after")
    def _messages_or_prompt(self) -> TokenizeRequest:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("send exactly one of `messages` (a chat) or `prompt` (text)")
        if self.messages is not None and not self.messages:
            raise ValueError("messages is empty; send at least one message")
        return self


class UpdateWeightsRequest(BaseModel):
    """POST /update_weights."""

    path: str
    """Directory of a HF checkpoint (config.json + safetensors) of the served architecture."""
    version: int = Field(ge=0)
    """Policy version the new weights carry."""


def generation_params(request: SamplingFields, max_tokens: int | None, prompt_len: int, max_model_len: int,
                      top_logprobs: int, prompt_param: str) -> GenerationParams:
    """Checks lengths and builds the scheduler's parameters; RequestError names the offending numbers."""
    if prompt_len == 0:
        raise RequestError("the prompt is empty; pass at least one token", param=prompt_param)
    room = max_model_len - prompt_len
    if room < 1:
        raise RequestError(f"the prompt has {prompt_len} tokens but the model's maximum context length is "
                           f"{max_model_len} tokens; shorten the prompt", param=prompt_param)
    wanted = room if max_tokens is None else max_tokens
    if wanted > room:
        raise RequestError(f"this model's maximum context length is {max_model_len} tokens, but "
                           f"{prompt_len + wanted} were requested ({prompt_len} in the prompt, {wanted} for "
                           "the completion); "
                           "reduce max_tokens or the prompt", param="max_tokens")
    return GenerationParams(
        sampling=RowSampling(request.temperature, request.top_p, request.top_k, request.min_p), max_tokens=wanted,
        stop=request.stops(), stop_token_ids=tuple(request.stop_token_ids or ()),
        ignore_eos=request.ignore_eos,
        include_stop_str=request.include_stop_str_in_output, seed=request.seed, n=request.n,
        top_logprobs=top_logprobs)
