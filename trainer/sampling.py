"""The sampling parameters a call's tokens were drawn with, as the trainer reads them from the gateway's record.

The gateway records on every call the parameters the engine actually applied (`CallRecord.sampling`: temperature,
top_p, top_k, min_p, plus what the harness requested and whether the gateway enforced the policy's); the engine then
reports the logprobs of that processed distribution (softmax(logits / T) restricted to the top-k / min-p / top-p
kept set, renormalised). The trainer must score its tokens under the same distribution, so every sample carries the
parameters of its calls (`trainer.samples`) and the backends apply them (`trainer.backends.sampling_filter`).

Records written before the gateway recorded sampling have none: they are read as temperature 1, no filtering (what
the engines reported then: raw logprobs). A temperature below `GREEDY_MAX_TEMPERATURE` is greedy decoding (vLLM's
threshold): its tokens were not sampled from any distribution the trainer could take a ratio against, so they are
masked (`trainer.sample_masks`). So are the tokens of a call whose harness's penalties or logit bias reached the engine
(recorded in `requested` and not enforced: gateway `sampling.train: record`): vLLM applies them, and they depend on
more than the logits (the tokens generated so far), which the trainer does not recompute; and those of a call whose
constraining `response_format` (a grammar) reached the engine, for the same reason; and those of a call whose forcing
`tool_choice` the engine enforced on the response itself (vLLM's grammar), unlike the embedded engine, which forces
the call's opening in the prompt and samples the rest freely (the gateway records `forced_prompt_tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GREEDY_MAX_TEMPERATURE = 1e-5
"""Temperatures below this decode greedily (vLLM's `_SAMPLING_EPS`; the embedded engine's 0 is below it)."""

FIELDS = ("temperature", "top_p", "top_k", "min_p")
"""The applied parameters read from a record's `sampling`."""
NEUTRAL_PENALTIES: dict[str, object] = {"frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1,
                                        "logit_bias": {}, "response_format": {"type": "text"}}
"""Request fields (the gateway's `PENALTY_FIELDS`) that change the distribution beyond the four, at no-op values; and
`response_format`, which the gateway records in `requested` only when it constrains the answer (a JSON grammar on
vLLM: its tokens drawn from the grammar-masked distribution)."""


@dataclass(frozen=True)
class SamplingParams:
    """The distribution a call's tokens were drawn from: logits / temperature, then top-k, min-p and top-p."""

    temperature: float = 1.0
    """Logits are divided by it; below GREEDY_MAX_TEMPERATURE the call decoded greedily."""
    top_p: float = 1.0
    """Nucleus mass kept, in (0, 1]; 1: no top-p filter."""
    top_k: int = 0
    """Most likely tokens kept; 0: no top-k filter."""
    min_p: float = 0.0
    """Tokens kept when their probability is at least min_p times the most likely one's; 0: no min-p filter."""
    penalized: bool = False
    """The harness's penalties or logit bias reached the engine: a distribution the trainer does not recompute."""

    def __post_init__(self) -> None:
        checks = (
            ("temperature", math.isfinite(self.temperature) and self.temperature >= 0, "a finite value >= 0"),
            ("top_p", 0 < self.top_p <= 1, "a value in (0, 1]"),
            ("top_k", self.top_k >= 0, "an integer >= 0 (0: off)"),
            ("min_p", 0 <= self.min_p <= 1, "a value in [0, 1]"),
        )
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"SamplingParams.{name}={getattr(self, name)!r}: use {expected}")

    @property
    def greedy(self) -> bool:
        """True for greedy decoding (no distribution to train against)."""
        return self.temperature < GREEDY_MAX_TEMPERATURE

    @property
    def trainable(self) -> bool:
        """False when the trainer cannot score the tokens under the distribution they were drawn from (greedy, or
        penalised): such calls' tokens are masked."""
        return not self.greedy and not self.penalized

    @property
    def filtered(self) -> bool:
        """True when top-k, min-p or top-p removed tokens from the distribution."""
        return self.top_p < 1.0 or self.top_k > 0 or self.min_p > 0.0

    @property
    def plain(self) -> bool:
        """True for the model's own distribution: temperature 1, no filtering (the trainer's fast path)."""
        return self.temperature == 1.0 and not self.filtered

    def describe(self) -> str:
        """A short text for error messages."""
        penalized = ", with penalties" if self.penalized else ""
        return f"temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, min_p={self.min_p}{penalized}"


PLAIN = SamplingParams()
"""Temperature 1, no filtering: the policy's own distribution (and how records without `sampling` are read)."""


def sampling_params(raw: Any) -> SamplingParams:
    """The applied parameters of a record's `sampling` (None, a mapping or an object with the fields), normalised:
    a missing field is its neutral value, top_k <= 0 (vLLM's -1) is off, top_p above 1 is 1; `penalized` when
    `requested` holds a penalty, a logit bias or a constraining response format that was not enforced away."""
    if raw is None:
        return PLAIN
    get = raw.get if isinstance(raw, Mapping) else lambda name, default=None: getattr(raw, name, default)
    values = {name: get(name, None) for name in FIELDS}
    defaults = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    for name, value in values.items():
        if value is None:
            values[name] = defaults[name]
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"recorded sampling {name}={value!r}: expected a number; the gateway records numbers")
    return SamplingParams(
        temperature=float(values["temperature"]),
        top_p=min(float(values["top_p"]), 1.0),
        top_k=max(int(values["top_k"]), 0),
        min_p=float(values["min_p"]),
        penalized=(not get("enforced", False) and _penalized(get("requested", None)))
        or _grammar_forced(get("requested", None), get("forced_prompt_tokens", None)),
    )


def _grammar_forced(requested: object, forced_prompt_tokens: object) -> bool:
    """True when a forcing `tool_choice` (required, a named function) reached an engine that did not force the call's
    opening in the prompt (`forced_prompt_tokens` None): vLLM constrains the response's own tokens with a grammar,
    and reports their logprobs under the grammar's mask, which the trainer does not recompute. The gateway forwards
    tool_choice even when it enforces the policy's sampling (the harness needs its call), so this holds either way."""
    return isinstance(requested, Mapping) and requested.get("tool_choice") is not None and forced_prompt_tokens is None


def _penalized(requested: object) -> bool:
    """True when the harness's request fields hold a penalty or logit bias other than its no-op value."""
    if not isinstance(requested, Mapping):
        return False
    return any(requested.get(key) not in (None, neutral) for key, neutral in NEUTRAL_PENALTIES.items())


def mergeable(branch: SamplingParams | None, call: SamplingParams) -> bool:
    """Whether a call sampled with `call` may extend a sample whose trainable tokens were sampled with `branch`
    (None: none yet). Calls the trainer cannot score (greedy, penalised) are masked: context for any sample."""
    return not call.trainable or branch is None or branch == call
