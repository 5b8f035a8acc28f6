"""Training samples from a rollout's recorded calls, by best-effort token-prefix merging.

A rollout's successful calls are walked in `seq` order. Every open branch of the rollout is a
sample under construction whose context is the last merged call's prompt + response. A call
extends the branch whose context is the longest token-ID prefix of its prompt: the new prompt
tail becomes observation tokens (loss mask 0, logprob 0) and the response is trainable (mask 1,
its rollout logprobs). A call that extends no branch opens a new one (a new sample) and, when the
rollout already had branches, is counted as a merge failure (see `trainer.merge_failures`).
Token IDs are never re-tokenized.

Side calls (a token count, a small-model call for a title: `RecordedCall.side`) are skipped by default and counted
(`SampleLimits.side_calls`). A call answered with `n` > 1 choices: its first choice merges as above; each other choice
is an independent sample of the same prompt (`SampleLimits.extra_choices`, default include) and opens a branch of its
own whose context is that prompt (observation) and whose only trainable span is the choice. So a later call that
continues any of the choices extends that choice's branch by token prefix, and no trainable token is in two samples.
Every call carries the sampling parameters the engine applied (`trainer.sampling`; temperature 1 and no filtering
for records without them), and a sample has one set: the trainer scores all its trainable tokens under that one
processed distribution. So a call extends only a branch sampled with the same parameters; when the only branch its
prompt extends was sampled differently, it opens a new branch (a new sample, counted as
`samples/calls_sampling_split`, not as a merge failure). Greedy calls (temperature 0) and calls whose harness's
penalties reached the engine extend any branch: their tokens are context, masked below.
Then `trainer.sample_masks` masks those tokens, tokens without a logprob and, when configured, responses cut off
for length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from trainer.merge_failures import Decode, classify_merge_failure, common_prefix_len
from trainer.sample_masks import masked_samples
from trainer.sample_stats import SampleCounters, SampleStats
from trainer.sampling import PLAIN, SamplingParams, mergeable


@dataclass(frozen=True)
class RecordedChoice:
    """A choice after the first of a call answered with `n` > 1 choices."""

    index: int
    """The choice's index in the answer (>= 1)."""
    prompt_token_ids: tuple[int, ...]
    """The choice's own prompt when it differs from the call's (completions with several prompts); empty: the call's."""
    response_token_ids: tuple[int, ...]
    """Exact response token IDs the engine sampled for this choice."""
    response_logprobs: tuple[float, ...]
    """Sampling logprob of each response token (same length as the response)."""
    finish_reason: str | None
    """The engine's finish reason for this choice."""


@dataclass(frozen=True)
class RecordedCall:
    """One call recorded by the gateway, as the trainer sees it."""

    rollout_id: str
    """The rollout (one harness run) the call belongs to."""
    group_id: str
    """The group of rollouts on the same task, for group-relative advantages."""
    seq: int
    """Call order within the rollout attempt (0, 1, ...)."""
    prompt_token_ids: tuple[int, ...]
    """Exact prompt token IDs the engine saw."""
    response_token_ids: tuple[int, ...]
    """Exact response token IDs the engine sampled."""
    response_logprobs: tuple[float, ...]
    """Sampling logprob of each response token (same length as the response)."""
    policy_version: int
    """Version of the policy weights that produced the response."""
    ok: bool
    """False for failed calls (engine errors, timeouts); those are skipped."""
    finish_reason: str | None
    """The engine's finish reason ("stop", "length", ...), None when unknown."""
    extra_choices: tuple[RecordedChoice, ...] = ()
    """The answer's choices after the first (`n` > 1), by index."""
    side: bool = False
    """A harness's side call (the gateway marks token counts and `side_models` calls)."""
    sampling: SamplingParams = PLAIN
    """The sampling parameters the engine applied (every choice of the call shares them)."""
    recorded_prefix: int | None = None
    """Prompt tokens the gateway took from an earlier call's record (its recorded turns); None: none."""


@dataclass(frozen=True)
class TrainableSpan:
    """A contiguous run of trainable tokens in a sample, produced by one call."""

    start: int
    """Position of the first response token in the sample."""
    end: int
    """Position one past the last response token."""
    call_seq: int
    """`seq` of the call that produced the span."""
    policy_version: int
    """Policy version that sampled the span."""
    choice: int = 0
    """Index of the call's choice that produced the span (0 unless the call asked for `n` > 1)."""


@dataclass(frozen=True, eq=False)
class Sample:
    """One training sequence with its loss mask, rollout logprobs and provenance (arrays are read-only)."""

    rollout_id: str
    """Rollout the sample came from."""
    group_id: str
    """Group of that rollout."""
    call_seqs: tuple[int, ...]
    """`seq` of every call merged into the sample, in order."""
    spans: tuple[TrainableSpan, ...]
    """Trainable spans, one per merged call, in position order."""
    token_ids_T: np.ndarray
    """Token IDs (int64), prompt and responses."""
    loss_mask_T: np.ndarray
    """True exactly on sampled (trainable) response tokens."""
    logprobs_T: np.ndarray
    """Rollout logprob (float32) of each trainable token, 0 elsewhere."""
    policy_versions_T: np.ndarray
    """Policy version (int64) of each trainable token, -1 elsewhere."""
    sampling: SamplingParams = PLAIN
    """The sampling parameters of every trainable token (one set per sample: calls sampled otherwise split)."""

    @property
    def num_tokens(self) -> int:
        """Sequence length in tokens."""
        return int(self.token_ids_T.shape[0])

    @property
    def num_trainable_tokens(self) -> int:
        """Number of tokens with loss mask 1."""
        return sum(span.end - span.start for span in self.spans)


@dataclass(frozen=True)
class SampleLimits:
    """What of each call goes into samples: length limits (the merged sample length is then at most prompt +
    response limit), side calls, and the choices after the first."""

    max_prompt_tokens: int | None = None
    """Longest prompt (context before a response) kept; None for no limit."""
    max_response_tokens: int | None = None
    """Longest trainable response; None for no limit."""
    overflow: Literal["truncate", "drop"] = "truncate"
    """Responses over max_response_tokens: truncate (keep the first tokens) or drop (skip the call)."""
    prompt_overflow: Literal["drop", "truncate"] = "drop"
    """Prompts over max_prompt_tokens: drop (skip the call, counted as samples/prompts_dropped) or truncate (keep the
    last tokens, a new sample scored against another context than the engine saw)."""
    length_calls: Literal["train", "mask"] = "train"
    """Responses that finished for `length`: train (like complete ones, verl's default) or mask (DAPO's overlong
    filtering: context for later calls, no loss; counted as samples/calls_length_masked)."""
    side_calls: Literal["skip", "include"] = "skip"
    """A harness's side calls (token counts, small-model calls for titles; gateway `side_models`): skip (counted as
    samples/calls_side_skipped) or include like any other call."""
    extra_choices: Literal["include", "skip"] = "include"
    """The choices after the first of an `n` > 1 answer: include (each its own sample of the call's prompt, with the
    rollout's advantage) or skip (counted); skip when the harness picks one choice by its content (best-of-n), as the
    others did not earn the rollout's reward."""

    def __post_init__(self) -> None:
        for name in ("max_prompt_tokens", "max_response_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"SampleLimits.{name}={value}: use a positive token count or None")
        for name, allowed in (("overflow", ("truncate", "drop")), ("prompt_overflow", ("drop", "truncate")),
                              ("length_calls", ("train", "mask")), ("side_calls", ("skip", "include")),
                              ("extra_choices", ("include", "skip"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"SampleLimits.{name}={getattr(self, name)!r}: use {' or '.join(map(repr, allowed))}")


@dataclass(frozen=True)
class BuiltSamples:
    """The samples built from a set of recorded calls, with their counts."""

    samples: tuple[Sample, ...]
    """Samples, grouped by rollout (first-seen order), by first call within a rollout."""
    stats: SampleStats
    """What happened while building them."""


@dataclass
class _Branch:
    """An open sample: the last merged call's prompt and response, and the spans so far."""

    prompt: tuple[int, ...]
    """Prompt of the last merged call (it starts with everything before)."""
    response: tuple[int, ...]
    """Response of the last merged call (empty only before the first `extend`)."""
    head_len: int
    """Length of the branch's first prompt, for merge-failure classification."""
    spans: list[TrainableSpan]
    """Trainable spans so far."""
    logprobs: list[tuple[float, ...]]
    """Rollout logprobs of each span."""
    sampling: SamplingParams | None = None
    """The sampling parameters of its trainable calls; None while it holds masked (greedy, penalised) calls only."""
    last_sampling: SamplingParams = PLAIN
    """The parameters of the last call merged (the sample's when every call was greedy: all masked)."""

    @property
    def context_len(self) -> int:
        """Tokens in the branch so far."""
        return len(self.prompt) + len(self.response)

    def is_prefix_of(self, prompt: tuple[int, ...]) -> bool:
        """True when `prompt` starts with this branch's context (bulk tuple comparisons)."""
        n_prompt, n = len(self.prompt), self.context_len
        if len(prompt) < n or prompt[n - 1] != self.response[-1]:
            return False
        return prompt[:n_prompt] == self.prompt and prompt[n_prompt:n] == self.response

    def extend(
        self,
        call: RecordedCall,
        prompt: tuple[int, ...],
        response: tuple[int, ...],
        logprobs: tuple[float, ...],
        choice: int = 0,
    ) -> None:
        start = len(prompt)
        self.spans.append(TrainableSpan(start, start + len(response), call.seq, call.policy_version, choice))
        self.logprobs.append(logprobs)
        self.prompt, self.response = prompt, response
        self.last_sampling = call.sampling
        if call.sampling.trainable:
            self.sampling = call.sampling

    def to_sample(self, rollout_id: str, group_id: str) -> Sample:
        token_ids_T = np.array(self.prompt + self.response, dtype=np.int64)
        n = token_ids_T.shape[0]
        loss_mask_T = np.zeros(n, dtype=bool)
        logprobs_T = np.zeros(n, dtype=np.float32)
        policy_versions_T = np.full(n, -1, dtype=np.int64)
        for span, span_logprobs in zip(self.spans, self.logprobs, strict=True):
            loss_mask_T[span.start : span.end] = True
            logprobs_T[span.start : span.end] = span_logprobs
            policy_versions_T[span.start : span.end] = span.policy_version
        for array in (token_ids_T, loss_mask_T, logprobs_T, policy_versions_T):
            array.flags.writeable = False
        return Sample(
            rollout_id,
            group_id,
            tuple(s.call_seq for s in self.spans),
            tuple(self.spans),
            token_ids_T,
            loss_mask_T,
            logprobs_T,
            policy_versions_T,
            self.sampling if self.sampling is not None else self.last_sampling,
        )


def build_samples(
    calls: Iterable[RecordedCall],
    *,
    limits: SampleLimits = SampleLimits(),
    decode: Decode | None = None,
) -> BuiltSamples:
    """Merge recorded calls (any number of rollouts, any order) into training samples.

    `decode` (a tokenizer's decode) lets merge failures be classified as retokenization or
    template; without it every merge failure counts as "other".
    """
    by_rollout: dict[str, list[RecordedCall]] = {}
    for call in calls:
        by_rollout.setdefault(call.rollout_id, []).append(call)
    counters = SampleCounters()
    samples: list[Sample] = []
    per_rollout: list[int] = []
    for rollout_calls in by_rollout.values():
        rollout = _rollout_samples(rollout_calls, limits, decode, counters)
        samples.extend(rollout)
        per_rollout.append(len(rollout))
    tokens = sum(sample.num_tokens for sample in samples)
    trainable = sum(sample.num_trainable_tokens for sample in samples)
    return BuiltSamples(tuple(samples), counters.freeze(per_rollout, tokens, trainable))


def _rollout_samples(
    calls: list[RecordedCall], limits: SampleLimits, decode: Decode | None, counters: SampleCounters
) -> list[Sample]:
    ordered = sorted(calls, key=lambda call: call.seq)
    _check_rollout(ordered)
    branches: list[_Branch] = []
    for call in ordered:
        counters.calls += 1
        counters.calls_recorded_tokens += bool(call.recorded_prefix)
        _merge_call(call, branches, limits, decode, counters)
    branches.sort(key=lambda branch: branch.spans[0].call_seq)
    samples = [branch.to_sample(ordered[0].rollout_id, ordered[0].group_id) for branch in branches]
    return masked_samples(samples, ordered, limits.length_calls == "mask", counters)


def _check_rollout(ordered: list[RecordedCall]) -> None:
    first = ordered[0]
    for previous, call in zip(ordered, ordered[1:], strict=False):
        if call.seq == previous.seq:
            raise ValueError(
                f"rollout {call.rollout_id!r} has two calls with seq={call.seq}; "
                "pass one attempt's calls, each with a distinct seq"
            )
    for call in ordered:
        if call.group_id != first.group_id:
            raise ValueError(
                f"rollout {call.rollout_id!r} has calls in groups {first.group_id!r} and "
                f"{call.group_id!r}; a rollout belongs to exactly one group"
            )
        for choice in (call, *call.extra_choices):
            if len(choice.response_logprobs) != len(choice.response_token_ids):
                raise ValueError(
                    f"call seq={call.seq} of rollout {call.rollout_id!r} has "
                    f"{len(choice.response_logprobs)} logprobs for {len(choice.response_token_ids)} "
                    f"response tokens (choice {getattr(choice, 'index', 0)}); the gateway must record one "
                    "logprob per token"
                )


def _merge_call(
    call: RecordedCall,
    branches: list[_Branch],
    limits: SampleLimits,
    decode: Decode | None,
    counters: SampleCounters,
) -> None:
    if call.side and limits.side_calls == "skip":
        counters.calls_side_skipped += 1
        return
    if not call.ok:
        counters.calls_failed += 1
        return
    _merge_first_choice(call, branches, limits, decode, counters)
    for choice in call.extra_choices:
        _add_extra_choice(call, choice, branches, limits, counters)


def _merge_first_choice(
    call: RecordedCall,
    branches: list[_Branch],
    limits: SampleLimits,
    decode: Decode | None,
    counters: SampleCounters,
) -> None:
    if not call.response_token_ids:
        counters.calls_empty += 1
        return
    limited = _apply_limits(call, limits, counters)
    if limited is None:
        return
    prompt, response, logprobs, prompt_truncated = limited
    compatible = [branch for branch in branches if mergeable(branch.sampling, call.sampling)]
    target = None if prompt_truncated else _longest_prefix_branch(compatible, prompt)
    if target is not None:
        counters.calls_merged += 1
        target.extend(call, prompt, response, logprobs)
        return
    if not prompt_truncated and _longest_prefix_branch(branches, prompt) is not None:
        counters.calls_sampling_split += 1
    elif branches and not prompt_truncated:
        counters.merge_failures[_classify(prompt, branches, decode)] += 1
    branch = _Branch(prompt, (), len(prompt), [], [])
    branch.extend(call, prompt, response, logprobs)
    branches.append(branch)


def _add_extra_choice(
    call: RecordedCall,
    choice: RecordedChoice,
    branches: list[_Branch],
    limits: SampleLimits,
    counters: SampleCounters,
) -> None:
    """A choice after the first opens a branch of its own: its prompt as observation, the choice trainable."""
    if limits.extra_choices == "skip" or not choice.response_token_ids:
        counters.extra_choices_skipped += 1
        return
    as_call = replace(
        call,
        prompt_token_ids=choice.prompt_token_ids or call.prompt_token_ids,
        response_token_ids=choice.response_token_ids,
        response_logprobs=choice.response_logprobs,
        finish_reason=choice.finish_reason,
        extra_choices=(),
    )
    limited = _apply_limits(as_call, limits, counters)
    if limited is None:
        return
    prompt, response, logprobs, _ = limited
    counters.extra_choices_included += 1
    branch = _Branch(prompt, (), len(prompt), [], [])
    branch.extend(as_call, prompt, response, logprobs, choice.index)
    branches.append(branch)


def _apply_limits(
    call: RecordedCall, limits: SampleLimits, counters: SampleCounters
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...], bool] | None:
    """The call's (prompt, response, logprobs, prompt_truncated) within limits, or None when dropped."""
    prompt, response, logprobs = call.prompt_token_ids, call.response_token_ids, call.response_logprobs
    truncate = limits.overflow == "truncate"
    max_response = limits.max_response_tokens
    if max_response is not None and len(response) > max_response:
        if not truncate:
            counters.responses_dropped += 1
            return None
        counters.responses_truncated += 1
        response, logprobs = response[:max_response], logprobs[:max_response]
    max_prompt = limits.max_prompt_tokens
    prompt_truncated = max_prompt is not None and len(prompt) > max_prompt
    if prompt_truncated:
        if limits.prompt_overflow == "drop":
            counters.prompts_dropped += 1
            return None
        counters.prompts_truncated += 1
        prompt = prompt[len(prompt) - max_prompt :]
    return prompt, response, logprobs, prompt_truncated


def _longest_prefix_branch(branches: list[_Branch], prompt: tuple[int, ...]) -> _Branch | None:
    best: _Branch | None = None
    for branch in branches:
        if (best is None or branch.context_len >= best.context_len) and branch.is_prefix_of(prompt):
            best = branch
    return best


def _classify(prompt: tuple[int, ...], branches: Sequence[_Branch], decode: Decode | None) -> str:
    """Classify against the branch sharing the longest token prefix with `prompt` (latest on ties)."""
    nearest = max(reversed(branches), key=lambda b: common_prefix_len(b.prompt + b.response, prompt))
    return classify_merge_failure(prompt, nearest.prompt + nearest.response, nearest.head_len, decode)
