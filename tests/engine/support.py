"""Helpers for engine tests: the teacher-forced logprob reference, and the processed distribution's by hand."""

from __future__ import annotations

import numpy as np
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
                          logprobs: list[float], atol: float = 1e-4, *, temperature: float = 1.0,
                          top_p: float = 1.0) -> None:
    """Every reported logprob equals the teacher-forced one, under the distribution the tokens were sampled from
    (the engines' processed logprobs: `temperature` and `top_p` applied; the defaults are the raw distribution)."""
    assert len(logprobs) == len(token_ids) > 0
    if temperature == 1.0 and top_p == 1.0:
        expected = teacher_forced_logprobs(model, prompt_ids, token_ids)
    else:
        logits_TV = logits_at(model, prompt_ids, token_ids)
        expected = [float(processed_reference(row, temperature, top_p=top_p)[token])
                    for row, token in zip(logits_TV, token_ids, strict=True)]
    worst = max(abs(a - b) for a, b in zip(expected, logprobs, strict=True))
    assert worst < atol, f"logprob differs from teacher forcing by {worst}"


def processed_reference(logits_V: np.ndarray, temperature: float, top_p: float = 1.0, top_k: int = 0,
                        min_p: float = 0.0) -> np.ndarray:
    """Log-probabilities of the processed distribution by hand, in float64 (-inf outside the kept set)."""
    z = logits_V.astype(np.float64) / temperature
    keep = np.ones(z.shape, dtype=bool)
    if 0 < top_k < z.size:
        keep &= z >= np.sort(z)[::-1][top_k - 1]
    keep &= np.exp(z - z.max()) >= min_p
    q = np.where(keep, np.exp(z - z.max()), 0.0)
    q /= q.sum()
    order = np.argsort(-q, kind="stable")
    before = np.cumsum(q[order]) - q[order]
    nucleus = np.zeros_like(keep)
    nucleus[order] = before < top_p
    nucleus[order[0]] = True
    keep &= nucleus
    q = np.where(keep, q, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(q / q.sum())


@torch.inference_mode()
def logits_at(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """The model's logits at each generated position (teacher forcing), float64, [T, V]."""
    logits_TV = model(torch.tensor([prompt + tokens])).logits[0].double()
    return logits_TV[len(prompt) - 1:len(prompt) - 1 + len(tokens)].numpy()
