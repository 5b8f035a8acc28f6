"""Logprobs and entropies of a micro-batch's trainable tokens, recomputed from an HF causal LM.

The decoder runs over every token (a shared-prefix micro-batch: its family prefixes once, then the suffix rows
attending to their family's keys and values, `trainer.shared_prefix`); the output head runs only on the hidden states
that predict trainable tokens, so the [N, vocab] logits (the largest tensors of a step) exist only for the N targets.
Each target is scored under the distribution it was sampled from (`inputs.sampling`: temperature, top-k, min-p,
top-p; `trainer.backends.sampling_filter`); a micro-batch sampled at temperature 1 without filtering takes the plain
log-softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from engines.hf_cache import forward_with_cache
from trainer.backends.model_inputs import ModelInputs
from trainer.backends.sampling_filter import sampled_logprobs

UNSUPPORTED_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
"""Config fields of models whose forward changes logits after the output head (not reproduced here)."""


@dataclass(frozen=True)
class TokenLogprobs:
    """Per-target results of one forward pass."""

    logprobs_N: torch.Tensor
    """log p(target | context) (float32, differentiable)."""
    entropy_N: torch.Tensor
    """Entropy of the predicting distribution (float32; differentiable only when asked)."""


def check_plain_output_head(config: object) -> None:
    """Raises ValueError when the model transforms its logits after the output head."""
    for field in UNSUPPORTED_LOGIT_TRANSFORMS:
        value = getattr(config, field, None)
        if value not in (None, 1, 1.0):
            raise ValueError(
                f"model config has {field}={value!r}: its logits are transformed after the output head, "
                "which the torch backend does not reproduce; use a model without it or extend token_logprobs"
            )


def token_logprobs(model: torch.nn.Module, inputs: ModelInputs, *, entropy_grad: bool = False) -> TokenLogprobs:
    """Teacher-forced logprobs (and entropies) of `inputs`' trainable tokens under `model`."""
    hidden = _after_prefixes(model, inputs) if inputs.prefix is not None else model.base_model(
        input_ids=inputs.input_ids,
        position_ids=inputs.position_ids,
        attention_mask=inputs.attention_mask,
        use_cache=False,
    ).last_hidden_state
    hidden_NH = hidden[inputs.target_rows_N, inputs.target_cols_N]
    logits_NV = model.get_output_embeddings()(hidden_NH)
    logprobs_N, entropy_N = sampled_logprobs(logits_NV, inputs.target_ids_N, inputs.sampling,
                                             entropy_grad=entropy_grad)
    return TokenLogprobs(logprobs_N, entropy_N)


def _after_prefixes(model: torch.nn.Module, inputs: ModelInputs) -> torch.Tensor:
    """Hidden states of the suffix rows: the family prefixes run once into a KV cache, each row's family's keys and
    values gathered per row (the gradient flows back through the gather into the prefix pass), then the rows."""
    prefix = inputs.prefix
    assert prefix is not None
    decoder = model.base_model
    cache = DynamicCache(config=model.config)
    width = prefix.input_ids.shape[1]
    forward_with_cache(decoder, cache, input_ids=prefix.input_ids, attention_mask=prefix.attention_mask,
                position_ids=torch.arange(width).expand_as(prefix.input_ids))
    rows = DynamicCache(ddp_cache_data=[(layer.keys.index_select(0, prefix.family_R),
                                         layer.values.index_select(0, prefix.family_R)) for layer in cache.layers])
    return forward_with_cache(decoder, rows, input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                       position_ids=inputs.position_ids).last_hidden_state

