"""The sampling parameters of a harness call: what the harness asked for, what the gateway forwards, what is recorded.

In train mode the gateway enforces the policy's sampling by default (`SamplingPolicy.train = enforce`): whatever the
harness sent, the engine samples at the policy's temperature with top-p 1 and top-k / min-p off, and the harness's
own values are kept in the record's `requested`. With `train = record`, and always in val mode, the harness's values
go to the engine as it sent them. Either way the four parameters are sent explicitly (an absent one as its neutral
value), so what the record says the engine applied does not depend on an engine's defaults (vLLM's
`--generation-config auto` would otherwise apply the checkpoint's own).

A rollout created with a `sampling_seed` (seeded validation: `rollouts.feed.FeedConfig.sampling_seed`) has
every call seeded by the gateway, whatever the harness sent: call `seq` of an attempt samples with
`call_seed(sampling_seed, seq)` (`seed_record`, `seeded_body`), recorded in the call's `SamplingRecord.seed`. The
harness need not cooperate: the same weights, the same task and the same seed give the same answers (on an engine
that honours a per-request seed: the embedded engine and vLLM do), and a retried attempt samples as the first did.

Pure functions; the proxy (`routes/harness.py`) and the translated protocols (`translated.py`) call `apply_policy`.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.capture import MAX_CHOICES
from gateway.errors import BadRequest
from gateway.records import RolloutMode, SamplingRecord
from gateway.request_fields import kind_of, screen
from gateway.strict_json import is_integer

GREEDY_BELOW = 1e-5
"""A temperature below this is greedy (vLLM's `_SAMPLING_EPS`): the engine takes the argmax and ignores top-p,
top-k and min-p."""
NEUTRAL: dict[str, float | int] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
"""The four applied parameters and the values that leave the model's distribution as it is (top-k 0: off)."""
PENALTY_FIELDS = ("frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias")
"""Other request fields that change the distribution a token is sampled from: recorded in `requested`, removed when
the policy is enforced, forwarded as sent otherwise."""
FREE_FORMATS = (None, "text")
"""`response_format` types that constrain nothing; any other (`json_object`, `json_schema`, `structural_tag`) is a
grammar on vLLM: recorded in `requested`, removed when the policy is enforced, and its call's tokens masked by the
trainer otherwise (`trainer.sampling`)."""
REQUESTED_FIELDS = (*NEUTRAL, *PENALTY_FIELDS, "seed")
"""The harness's sampling fields copied into `SamplingRecord.requested` (any protocol: Anthropic Messages sends
temperature / top_p / top_k, Responses temperature / top_p, chat and completions any of these)."""


class SamplingMode(StrEnum):
    """What the gateway does with a train rollout's sampling parameters."""

    ENFORCE = "enforce"
    RECORD = "record"


class SamplingPolicy(BaseModel):
    """Gateway config key `sampling`: how train-mode calls sample (val-mode calls always sample as the harness asks)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train: SamplingMode = Field(default=SamplingMode.ENFORCE, description="enforce: train calls sample at the "
                                "policy's temperature with top_p 1, top_k and min_p off, penalties removed, whatever "
                                "the harness sent (its values are recorded in `requested`); record: the harness's "
                                "values are forwarded and recorded as sent.")
    temperature: float = Field(default=1.0, gt=0.0, description="The policy's temperature, enforced on train calls "
                               "(the trainer must compute logprobs at the same temperature).")


def requested_sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The harness's own sampling fields as it sent them (null values left out); empty when it sent none."""
    return {key: body[key] for key in REQUESTED_FIELDS if body.get(key) is not None}


def check_types(requested: dict[str, Any]) -> None:
    """BadRequest naming the field when a sampling parameter is not a number (top_k: not an integer) or the
    temperature is negative; other ranges are the engine's to refuse (its refusal is recorded with the call)."""
    for key in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
        value = requested.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise BadRequest(f"'{key}' must be a number, got {value!r}", param=key)
    if isinstance(requested.get("temperature"), (int, float)) and requested["temperature"] < 0:
        raise BadRequest(f"'temperature' must be at least 0 (0: greedy), got {requested['temperature']!r}",
                         param="temperature")
    top_k = requested.get("top_k")
    if top_k is not None and not is_integer(top_k):
        raise BadRequest(f"'top_k' must be an integer (0 or -1: off), got {top_k!r}", param="top_k")


def check_choices(n: Any) -> None:
    """BadRequest unless `n` (the choices asked for) is absent or an integer in [1, MAX_CHOICES]: more choices than
    the gateway records would come back as an answer off the protocol, a failure the harness chose."""
    if n is not None and (not is_integer(n) or not 1 <= n <= MAX_CHOICES):
        raise BadRequest(f"'n' must be an integer from 1 to {MAX_CHOICES}, got {str(n)[:40]}", param="n")


def applied_values(values: dict[str, Any]) -> dict[str, float | int]:
    """The four parameters an engine applies for `values` (absent ones neutral): top_k -1 is 0 (off); a greedy
    temperature makes top_p 1, top_k 0 and min_p 0, as vLLM resets them."""
    given = {key: values.get(key, neutral) for key, neutral in NEUTRAL.items()}
    top_k = int(given["top_k"])
    applied: dict[str, float | int] = {"temperature": float(given["temperature"]), "top_p": float(given["top_p"]),
                                       "top_k": 0 if top_k == -1 else top_k, "min_p": float(given["min_p"])}
    if applied["temperature"] < GREEDY_BELOW:
        applied.update(top_p=1.0, top_k=0, min_p=0.0)
    return applied


def enforces(policy: SamplingPolicy, mode: RolloutMode) -> bool:
    """Whether a call of a rollout in `mode` samples at the policy's parameters."""
    return mode == RolloutMode.TRAIN and policy.train == SamplingMode.ENFORCE


def apply_policy(chat: dict[str, Any], requested: dict[str, Any], mode: RolloutMode,
                 policy: SamplingPolicy) -> tuple[dict[str, Any], SamplingRecord]:
    """(the body to forward, the call's sampling record) for an engine-bound request `chat` (chat or completions;
    a translated protocol's chat request) whose harness sent `requested` (`requested_sampling` of its own body).

    Only the fields `gateway.request_fields` forwards go on (the others' names are recorded in
    `requested["dropped"]`; the ones it refuses were refused by `proxy.parse_request`). Enforced: the four parameters
    set to the policy's, the penalty fields and a constraining `response_format` removed. Otherwise: the body as it
    is, the parameters it lacks set to their neutral values. A constraining `response_format` and a `tool_choice` that
    forces a call are recorded in `requested` (as the engine got them). `n` and `stream` are left as they are: the
    parameters apply to every choice and to a streamed answer alike."""
    check_types(requested)
    check_choices(chat.get("n"))
    forwarded, dropped = screen(chat, kind_of(chat))
    forwarded = dict(forwarded)
    recorded = {**requested, **constraints(forwarded)}
    if dropped:
        recorded["dropped"] = dropped
    if enforces(policy, mode):
        for key in PENALTY_FIELDS:
            forwarded.pop(key, None)
        if "response_format" in recorded:
            del forwarded["response_format"]
        values: dict[str, Any] = {**NEUTRAL, "temperature": policy.temperature}
    else:
        values = {**NEUTRAL, **{key: chat[key] for key in NEUTRAL if chat.get(key) is not None}}
    forwarded.update(values)
    own_seed = int(forwarded["seed"]) if is_integer(forwarded.get("seed")) else None  # the harness's own
    return forwarded, SamplingRecord(**applied_values(values), requested=recorded, enforced=enforces(policy, mode),
                                     seed=own_seed)


def constraints(chat: dict[str, Any]) -> dict[str, Any]:
    """The decoding constraints of an engine-bound `chat`: its `response_format` unless it is plain text, its
    `tool_choice` when it forces a call (`required`, a named function)."""
    found: dict[str, Any] = {}
    response_format = chat.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict)
                                        or response_format.get("type") not in FREE_FORMATS):
        found["response_format"] = response_format
    tool_choice = chat.get("tool_choice")
    if tool_choice is not None and tool_choice not in ("auto", "none"):
        found["tool_choice"] = tool_choice
    return found


CALL_SEED_BITS = 31
"""Call seeds are below 2**31: every engine takes them (vLLM's and the embedded engine's per-request `seed`)."""


def call_seed(sampling_seed: int, seq: int) -> int:
    """The seed of call `seq` (its number in the attempt) of a rollout seeded with `sampling_seed`: a hash of both,
    so neighbouring rollouts and calls draw unrelated streams."""
    digest = hashlib.blake2b(f"{sampling_seed}:{seq}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << CALL_SEED_BITS) - 1)


def seed_record(sampling: SamplingRecord | None, sampling_seed: int | None, seq: int) -> SamplingRecord | None:
    """`sampling` with the gateway's seed for call `seq` when the rollout has a `sampling_seed` (else as it is)."""
    if sampling is None or sampling_seed is None:
        return sampling
    return sampling.model_copy(update={"seed": call_seed(sampling_seed, seq)})


def seeded_body(body: dict[str, Any], sampling: SamplingRecord | None) -> dict[str, Any]:
    """The engine-bound `body` with the `seed` its sampling record says the engine samples with."""
    if sampling is None or sampling.seed is None:
        return body
    return {**body, "seed": sampling.seed}
