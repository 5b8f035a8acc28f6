"""Helpers for engine tests: the teacher-forced logprob reference."""

from __future__ import annotations

import torch


@torch.inference_mode()
def teacher_forced_logprobs(model: torch.nn.Module, prompt_ids: list[int],
                            token_ids: list[int]) -> list[float]:
    """log p(token_i | prompt + tokens[:i]) from one unpadded forward pass over the whole sequence."""
    logits_TV = model(torch.tensor([prompt_ids + token_ids])).logits[0]
    logprobs_TV = torch.log_softmax(logits_TV.float(), dim=-1)
    start = len(prompt_ids) - 1
    return [float(logprobs_TV[start + i, token]) for i, token in enumerate(token_ids)]


def assert_teacher_forced(model: torch.nn.Module, prompt_ids: list[int], token_ids: list[int],
                          logprobs: list[float], atol: float = 1e-4) -> None:
    """Every reported logprob equals the teacher-forced one."""
    assert len(logprobs) == len(token_ids) > 0
    expected = teacher_forced_logprobs(model, prompt_ids, token_ids)
    worst = max(abs(a - b) for a, b in zip(expected, logprobs, strict=True))
    assert worst < atol, f"logprob differs from teacher forcing by {worst}"
