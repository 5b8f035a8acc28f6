"""A choice constrained to begin with one of several token sequences (pure): the function name of a forced tool call
when more than one function may be called (`forced_call.py`).

While the tokens generated so far are a proper beginning of some of the sequences, only the tokens that continue one
of them may be sampled: the other logits are masked to -inf before temperature and filtering (as vLLM applies its
allowed-token masks), so the row samples from the renormalised rest. Once the generated tokens complete a sequence
the choice samples freely. A token drawn under the mask was not drawn from the policy's own distribution, which is
what the trainer scores, so the engine reports no logprob for it (null; the trainer keeps it as context and leaves
it out of the loss).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Continuations = tuple[tuple[int, ...], ...]
"""Token sequences a choice must begin with one of; empty: unconstrained."""


def allowed_next_tokens(continuations: Continuations, generated: Sequence[int]) -> tuple[int, ...] | None:
    """The tokens that may follow `generated`, sorted; None when the choice is unconstrained from here on (no
    continuations, or `generated` already completes one of them)."""
    if not continuations:
        return None
    position = len(generated)
    allowed: set[int] = set()
    for sequence in continuations:
        shared = min(len(sequence), position)
        if tuple(generated[:shared]) != sequence[:shared]:
            continue
        if len(sequence) <= position:
            return None
        allowed.add(sequence[position])
    if not allowed:
        raise ValueError(f"generated tokens {list(generated)} left every constrained continuation {continuations}; "
                         "the constraint must be applied at every step")
    return tuple(sorted(allowed))


def constrain_logits_BV(logits_BV: torch.Tensor, allowed: Sequence[tuple[int, ...] | None]) -> torch.Tensor:
    """`logits_BV` with -inf outside each constrained row's allowed tokens (a copy when any row is constrained)."""
    if all(row is None for row in allowed):
        return logits_BV
    constrained_BV = logits_BV.clone()
    for b, row in enumerate(allowed):
        if row is not None:
            keep_V = torch.zeros(logits_BV.shape[-1], dtype=torch.bool, device=logits_BV.device)
            keep_V[list(row)] = True
            constrained_BV[b].masked_fill_(~keep_V, float("-inf"))
    return constrained_BV
