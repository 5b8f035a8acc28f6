"""Why a recorded call could not extend an open sample: retokenization, template, or other.

Classification needs the tokenizer's text view of the tokens, so it takes an optional
`decode(token_ids) -> str` (for example `tokenizer.decode`). Without a decoder no text
can be compared and every failure is classified as "other".

"Merge failure" means every new sample opened after a rollout's first (sampling splits and extra choices apart),
intended ones included: a harness that compacts its history or starts a subagent opens a new context on purpose, and
that call is classified "other". Only "retokenization" and "template" are merges that failed while the conversation
went on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

MergeFailureKind = Literal["retokenization", "template", "other"]
"""The three classes of merge failure, in the order they are tested."""

MERGE_FAILURE_KINDS: tuple[MergeFailureKind, ...] = ("retokenization", "template", "other")
"""All classes, for counters and metrics."""

Decode = Callable[[Sequence[int]], str]
"""A tokenizer's decode: token IDs to text, special tokens included."""


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading token IDs that `a` and `b` share (vectorized, no per-token Python loop)."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    a_N = np.asarray(a[:n], dtype=np.int64)
    b_N = np.asarray(b[:n], dtype=np.int64)
    mismatch_N = np.flatnonzero(a_N != b_N)
    return int(mismatch_N[0]) if mismatch_N.size else n


def classify_merge_failure(
    prompt: Sequence[int],
    context: Sequence[int],
    head_len: int,
    decode: Decode | None,
) -> MergeFailureKind:
    """Classify why `prompt` does not start with the token IDs of an open sample's `context`.

    - "retokenization": the decoded context is a text prefix of the decoded prompt, but the IDs
      differ (the harness re-encoded text the engine had produced as other tokens).
    - "template": the text diverges, but the prompt still starts with the text of the sample's
      head (its first prompt, `context[:head_len]`): the same conversation rendered differently,
      e.g. a chat template that drops reasoning from earlier turns, edited history, a fork.
    - "other": not even the head is a text prefix (a new conversation: subagent, compaction
      that rewrote the head), or no `decode` was given. Without a decoder every failure is
      "other", since no text can be compared.
    """
    if decode is None:
        return "other"
    prompt_text = decode(list(prompt))
    if prompt_text.startswith(decode(list(context))):
        return "retokenization"
    if head_len > 0 and prompt_text.startswith(decode(list(context[:head_len]))):
        return "template"
    return "other"
