"""Tokens taken out of the loss after merging: greedy calls, missing logprobs, and calls cut off at their length limit.

A call decoded greedily (temperature 0, `trainer.sampling.SamplingParams.greedy`) drew its tokens from no
distribution the trainer could take a ratio against (its recorded logprobs are not those of the argmax it took):
its tokens stay in their sample as context but are masked and counted (`samples/greedy_tokens_masked`). So are the
tokens of a call whose harness's penalties, logit bias or constraining `response_format` (a grammar) reached the
engine, or whose forcing `tool_choice` an engine enforced with a grammar over the response (vLLM)
(`samples/penalized_tokens_masked`).

A token whose recorded logprob is missing (the engine returned none: NaN, or another non-finite value) has no old
logprob to take a ratio against: it stays in its sample as context but is masked (loss mask 0, logprob 0) and counted
(`samples/logprobs_missing`), instead of turning the step's loss into NaN. With `SampleLimits.length_calls = "mask"`
(DAPO's overlong filtering) the response of a call that finished for `length` is masked the same way
(`samples/calls_length_masked`): it stays the context later calls extend, but is not trained on. Masked tokens leave
their span, which splits around them; a sample left without trainable tokens is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

import numpy as np

from trainer.sample_stats import SampleCounters

LENGTH_FINISH = "length"
"""The finish reason of a response cut off at its token limit."""


class Span(Protocol):
    """A trainable span (`trainer.samples.TrainableSpan`, a dataclass)."""

    start: int
    end: int
    call_seq: int
    choice: int


class MaskableSample(Protocol):
    """What masking needs of a sample (`trainer.samples.Sample`, a dataclass)."""

    @property
    def spans(self) -> tuple[Span, ...]: ...

    @property
    def loss_mask_T(self) -> np.ndarray: ...

    @property
    def logprobs_T(self) -> np.ndarray: ...

    @property
    def policy_versions_T(self) -> np.ndarray: ...


class Sampling(Protocol):
    """A call's sampling parameters (`trainer.sampling.SamplingParams`)."""

    @property
    def greedy(self) -> bool: ...

    @property
    def penalized(self) -> bool: ...


class Choice(Protocol):
    """A choice after the first (`trainer.samples.RecordedChoice`)."""

    index: int
    finish_reason: str | None


class Call(Protocol):
    """What masking needs of a recorded call (`trainer.samples.RecordedCall`)."""

    seq: int
    finish_reason: str | None

    @property
    def extra_choices(self) -> Sequence[Choice]: ...

    @property
    def sampling(self) -> Sampling: ...


SampleT = TypeVar("SampleT", bound=MaskableSample)


def masked_samples(
    samples: Sequence[SampleT], calls: Sequence[Call], mask_length: bool, counters: SampleCounters
) -> list[SampleT]:
    """`samples` of one rollout with greedy and missing-logprob tokens (and, with `mask_length`, cut-off calls)
    masked."""
    cut_off = _length_choices(calls) if mask_length else set()
    greedy = _choices_of(calls, lambda call: call.sampling.greedy)
    penalized = _choices_of(calls, lambda call: call.sampling.penalized and not call.sampling.greedy)
    kept = []
    for sample in samples:
        drop_T = np.zeros(sample.loss_mask_T.shape, dtype=bool)
        for span in sample.spans:
            if (span.call_seq, span.choice) in greedy:
                drop_T[span.start : span.end] = True
                counters.greedy_tokens_masked += span.end - span.start
            elif (span.call_seq, span.choice) in penalized:
                drop_T[span.start : span.end] = True
                counters.penalized_tokens_masked += span.end - span.start
        missing_T = np.asarray(sample.loss_mask_T, dtype=bool) & ~np.isfinite(sample.logprobs_T) & ~drop_T
        counters.logprobs_missing += int(missing_T.sum())
        drop_T |= missing_T
        for span in sample.spans:
            if (span.call_seq, span.choice) in cut_off:
                counters.calls_length_masked += 1
                drop_T[span.start : span.end] = True
        if not drop_T.any():
            kept.append(sample)
            continue
        masked = mask_tokens(sample, drop_T)
        if masked.spans:
            kept.append(masked)
    return kept


def _length_choices(calls: Sequence[Call]) -> set[tuple[int, int]]:
    """(seq, choice index) of every choice that finished for length."""
    found = {(call.seq, 0) for call in calls if call.finish_reason == LENGTH_FINISH}
    found |= {(call.seq, c.index) for call in calls for c in call.extra_choices if c.finish_reason == LENGTH_FINISH}
    return found


def _choices_of(calls: Sequence[Call], chosen: Callable[[Call], bool]) -> set[tuple[int, int]]:
    """(seq, choice index) of every choice of the calls `chosen` picks."""
    return {(call.seq, index) for call in calls if chosen(call)
            for index in (0, *(choice.index for choice in call.extra_choices))}


def mask_tokens(sample: SampleT, drop_T: np.ndarray) -> SampleT:
    """`sample` with the tokens in `drop_T` out of the loss (logprob 0, version -1) and its spans split around them."""
    keep_T = np.asarray(sample.loss_mask_T, dtype=bool) & ~drop_T
    spans = tuple(piece for span in sample.spans for piece in _split(span, keep_T))
    arrays = {
        "loss_mask_T": keep_T,
        "logprobs_T": np.where(keep_T, sample.logprobs_T, 0.0).astype(np.float32),
        "policy_versions_T": np.where(keep_T, sample.policy_versions_T, -1).astype(np.int64),
    }
    for array in arrays.values():
        array.flags.writeable = False
    return replace(sample, spans=spans, **arrays)


def _split(span: Span, keep_T: np.ndarray) -> list[Span]:
    """The runs of kept tokens inside `span`, each a span of the same call."""
    kept = np.flatnonzero(keep_T[span.start : span.end]) + span.start
    if kept.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(kept) > 1)
    starts = np.concatenate([[kept[0]], kept[breaks + 1]])
    ends = np.concatenate([kept[breaks] + 1, [kept[-1] + 1]])
    return [replace(span, start=int(s), end=int(e)) for s, e in zip(starts, ends, strict=True)]
