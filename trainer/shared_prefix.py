"""Prefix families: samples that start with the same context, whose context a `shared_prefix` micro-batch runs once.

A group's rollouts answer the same prompt, so a micro-batch of group members repeats the prompt's tokens once per
member, and the prompt is most of a sample's tokens (`make train`: about 215 of 276). A family is the samples whose
tokens before their *prefix end* are identical; the prefix end is the position that predicts a sample's first
trainable token, so every position that predicts a trained token lies after it. The `shared_prefix` layout runs each
family's prefix once and each member's suffix (from the prefix end on) attending to the prefix's keys and values:
exact, since a position's keys and values depend only on the tokens up to it (and the gradient of every member's
loss flows back into the one prefix pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class PrefixSequence(Protocol):
    """What prefix families need from a sample (a `trainer.samples.Sample` is one)."""

    @property
    def token_ids_T(self) -> np.ndarray: ...

    @property
    def loss_mask_T(self) -> np.ndarray: ...


@dataclass(frozen=True)
class Family:
    """Samples that share the tokens before their prefix end."""

    prefix_len: int
    """Tokens run once for the family (0: nothing shared; the members run whole)."""
    members: tuple[int, ...]
    """Indices of the member samples, in the order given."""


def prefix_len(sample: PrefixSequence) -> int:
    """Tokens before the position that predicts the first trainable token (a sample with none: all but its last)."""
    trainable = np.flatnonzero(np.asarray(sample.loss_mask_T, dtype=bool))
    end = int(trainable[0]) if trainable.size else int(np.asarray(sample.token_ids_T).shape[0])
    return max(end - 1, 0)


def prefix_families(samples: Sequence[PrefixSequence], indices: Sequence[int]) -> list[Family]:
    """The samples at `indices` grouped by identical prefixes, in order of each family's first member."""
    by_key: dict[bytes, list[int]] = {}
    lengths: dict[bytes, int] = {}
    for index in indices:
        sample = samples[index]
        length = prefix_len(sample)
        key = np.asarray(sample.token_ids_T[:length], dtype=np.int64).tobytes()
        by_key.setdefault(key, []).append(index)
        lengths[key] = length
    return [Family(lengths[key], tuple(members)) for key, members in by_key.items()]


def shared_tokens(families: Sequence[Family]) -> int:
    """Sample tokens a shared-prefix pass does not compute: each family's prefix once for every member but one."""
    return sum(family.prefix_len * (len(family.members) - 1) for family in families)
