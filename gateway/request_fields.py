"""Which fields of a harness's chat or completions request reach the engine: one table per route (data, not ifs).

The harness is the policy's (it runs in the sandbox and may send any body). The engine (vLLM 0.32, the embedded
engine) honours many fields beyond OpenAI's that force or shape the answer's tokens (grammars, allowed or banned
tokens, a minimum length, logits processors, beam search), change the prompt it renders from what the gateway
records (`chat_template`, `add_generation_prompt`, `continue_final_message`, `kv_transfer_params`, truncation,
embeddings) or the answer's shape the gateway captures (`echo`). Tokens shaped that way would be recorded as freely
sampled and trained as the policy's, and in val mode could force a graded answer. Fields that only end an answer
(`stop`, `stop_token_ids`, `ignore_eos`: no logit is masked, vLLM and the embedded engine only stop or not) or render
its text (`include_stop_str_in_output`, `skip_special_tokens`) are harmless: every token is still the policy's
sample. So a field reaches the engine only when the table below says so:

- `FORWARD`: sent as the harness sent it (its sampling fields then pass `gateway.sampling.apply_policy`, which may
  replace or remove them; `response_format` and a forcing `tool_choice` are recorded as constraints).
- `DROP`: not sent; its name is recorded in the call's `SamplingRecord.requested["dropped"]` (client metadata that
  changes nothing the model computes: `user`, `metadata`, `store`, ...). Any field not in the table is dropped too:
  an engine's new field cannot reach it before it is reviewed here.
- `REFUSE`: 400 naming the field and why, before the call is numbered or recorded: the harness asked for something
  the gateway cannot record faithfully.
- `GATEWAY`: the gateway's own (refused from a harness, sent when the gateway set it: `kv_transfer_params`, the
  recorded prompt of `gateway.recorded_turns`).

The translated protocols (Messages, Responses) build their chat request field by field (`protocols/`), so only the
fields their adapters write can reach `screen`; every one of those is `FORWARD` or `GATEWAY` (tested).
Checked against vLLM 0.32's `ChatCompletionRequest` and `CompletionRequest` (vllm/entrypoints/openai/
chat_completion/protocol.py, completion/protocol.py) and the embedded engine's `engines/serving/protocol.py`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from gateway.errors import BadRequest


class Action(StrEnum):
    """What the gateway does with a request field."""

    FORWARD = "forward"
    DROP = "drop"
    REFUSE = "refuse"
    GATEWAY = "gateway"


CHAT, COMPLETION = "chat", "completion"  # gateway.proxy's kinds
F, D, R, G = Action.FORWARD, Action.DROP, Action.REFUSE, Action.GATEWAY

FORCES = "forces or shapes the answer's tokens, which would be recorded as sampled by the policy"
PROMPT = "changes the prompt the engine renders from the one the gateway records"
NOT_SAMPLED = "selects or scores answers instead of sampling one, which the trainer cannot train on"
GATEWAYS = "is set by the gateway itself (the recorded prompt of an earlier call)"
SHAPE = "changes the answer's shape the gateway captures (the prompt's tokens returned as the answer's)"

COMMON: dict[str, tuple[Action, str]] = {
    # OpenAI's fields the engines honour
    "model": (F, "resolved to a registered model and renamed"), "stream": (F, ""), "stream_options": (F, ""),
    "max_tokens": (F, ""), "n": (F, "checked: at most the choices the gateway records"), "stop": (F, ""),
    "seed": (F, "replaced on a seeded rollout"), "temperature": (F, "sampling policy"), "top_p": (F, "sampling policy"),
    "top_k": (F, "sampling policy"), "min_p": (F, "sampling policy"),
    "frequency_penalty": (F, "removed when the policy is enforced; masked by the trainer otherwise"),
    "presence_penalty": (F, "as frequency_penalty"), "repetition_penalty": (F, "as frequency_penalty"),
    "logit_bias": (F, "as frequency_penalty"),
    "response_format": (F, "a grammar on vLLM: removed when the policy is enforced, recorded and masked otherwise"),
    "logprobs": (F, "forced on train calls"), "return_token_ids": (F, "forced"),
    # where an answer ends and how its text is rendered: every token still sampled from the policy, recorded as it was
    "stop_token_ids": (F, "ends the answer, as stop"), "ignore_eos": (F, "does not end the answer at EOS (no mask)"),
    "include_stop_str_in_output": (F, "text only"), "skip_special_tokens": (F, "text only"),
    "spaces_between_special_tokens": (F, "text only"),
    "return_tokens_as_token_ids": (F, "text only: the logprobs' tokens written as ids"),
    # client metadata: changes nothing the model computes
    "user": (D, ""), "metadata": (D, ""), "store": (D, ""), "service_tier": (D, ""), "prompt_cache_key": (D, ""),
    "prompt_cache_retention": (D, ""), "safety_identifier": (D, ""), "request_id": (D, "an engine-side id"),
    "session_id": (D, ""), "cache_salt": (D, ""), "priority": (D, "the engine's scheduling, not the harness's"),
    "stream_interval": (D, ""), "prompt_logprobs": (D, "engine memory; nothing the harness needs"),
    "logprob_token_ids": (D, ""), "return_token_offsets": (D, ""),
    "return_prompt_text": (D, ""), "include_reasoning": (D, "the policy has no reasoning"),
    "reasoning_effort": (D, "the policy has no reasoning"), "verbosity": (D, ""), "modalities": (D, "text only"),
    "prediction": (D, "a speculative-decoding hint"), "web_search_options": (D, "no hosted tools"),
    # vLLM's decoding constraints and logits processors
    "structured_outputs": (R, FORCES), "guided_choice": (R, FORCES), "guided_regex": (R, FORCES),
    "guided_json": (R, FORCES), "guided_grammar": (R, FORCES), "guided_decoding_backend": (R, FORCES),
    "guided_whitespace_pattern": (R, FORCES), "structural_tag": (R, FORCES), "allowed_token_ids": (R, FORCES),
    "bad_words": (R, FORCES), "min_tokens": (R, FORCES), "logits_processors": (R, FORCES),
    "vllm_xargs": (R, FORCES), "thinking_token_budget": (R, FORCES),
    "repetition_detection": (R, FORCES), "watermarking": (R, FORCES),
    "use_beam_search": (R, NOT_SAMPLED), "length_penalty": (R, NOT_SAMPLED), "best_of": (R, NOT_SAMPLED),
    # the prompt
    "add_special_tokens": (R, PROMPT), "truncate_prompt_tokens": (R, PROMPT), "truncation_side": (R, PROMPT),
    "mm_payload": (R, PROMPT), "mm_processor_kwargs": (R, PROMPT), "media_io_kwargs": (R, PROMPT),
    "return_mm_kwargs": (R, PROMPT), "ec_transfer_params": (R, PROMPT), "routed_experts_prompt_start": (R, PROMPT),
    "echo": (R, SHAPE),
    "kv_transfer_params": (G, GATEWAYS),
}
FIELDS: dict[str, dict[str, tuple[Action, str]]] = {
    CHAT: {**COMMON, "messages": (F, ""), "tools": (F, ""),
           "tool_choice": (F, "a forcing choice is recorded (the embedded engine forces the call's opening as "
                              "prompt tokens; vLLM constrains the whole call: engines/README.md)"),
           "parallel_tool_calls": (F, ""), "max_completion_tokens": (F, ""), "top_logprobs": (F, ""),
           "add_generation_prompt": (R, PROMPT), "continue_final_message": (R, PROMPT),
           "chat_template": (R, PROMPT), "chat_template_kwargs": (R, PROMPT), "documents": (R, PROMPT),
           "functions": (R, "is OpenAI's deprecated form of tools, which the engines ignore: send 'tools'"),
           "function_call": (R, "is OpenAI's deprecated form of tool_choice: send 'tool_choice'"),
           "prompt": (R, "belongs to /v1/completions: a chat request takes 'messages'"),
           "audio": (R, "asks for audio: the policy answers text only")},
    COMPLETION: {**COMMON, "prompt": (F, ""),
                 "suffix": (R, PROMPT), "prompt_embeds": (R, PROMPT),
                 "messages": (R, "belongs to /v1/chat/completions: a completions request takes 'prompt'")},
}
"""Every field the gateway knows, per route: (action, why). Unlisted fields are dropped and recorded."""

ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    CHAT: {"echo": False, "min_tokens": 0, "use_beam_search": False, "bad_words": [], "add_generation_prompt": True,
           "continue_final_message": False, "add_special_tokens": False},
}
ENGINE_DEFAULTS[COMPLETION] = {**ENGINE_DEFAULTS[CHAT], "add_special_tokens": True}
"""A refused field sent at the engines' default value (vLLM 0.32's, the embedded engine's) asks for nothing: it is
dropped (recorded) instead, as clients that send every field at its default do."""

FORWARDED = {kind: frozenset(k for k, (a, _) in table.items() if a in (F, G)) for kind, table in FIELDS.items()}
REFUSED = {kind: {k: why for k, (a, why) in table.items() if a in (R, G)} for kind, table in FIELDS.items()}


def check_refused(body: dict[str, Any], kind: str) -> None:
    """BadRequest naming the first field of `body` (a harness's request on route `kind`) the table refuses; a
    field sent as null counts as absent, one sent at the engines' default (`ENGINE_DEFAULTS`) is left to be
    dropped."""
    refused = REFUSED[kind]
    if refused.keys().isdisjoint(body):
        return
    defaults = ENGINE_DEFAULTS[kind]
    for key, value in body.items():
        if key in refused and value is not None and not _is_default(value, defaults.get(key, _ABSENT)):
            raise BadRequest(f"'{key}' {refused[key]}; the gateway does not forward it: leave it out "
                             "(gateway/README.md, 'Request fields')", param=key)


_ABSENT = object()


def _is_default(value: Any, default: Any) -> bool:
    """`value` is `default`, of the same JSON type (`false` is not `0`)."""
    return type(value) is type(default) and value == default


def kind_of(chat: dict[str, Any]) -> str:
    """The route an engine-bound body goes to: completions when it holds `prompt` (refused on chat), else chat."""
    return COMPLETION if chat.get("prompt") is not None else CHAT


def screen(body: dict[str, Any], kind: str) -> tuple[dict[str, Any], list[str]]:
    """(`body` with only the fields the table forwards, the names of the others, sorted): `body` itself when it
    holds none to drop."""
    allowed = FORWARDED[kind]
    if allowed.issuperset(body):
        return body, []
    return {k: v for k, v in body.items() if k in allowed}, sorted(k for k in body if k not in allowed)
