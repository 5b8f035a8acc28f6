"""Calling a transformers model with an explicit KV cache, across the keyword's rename (`past_key_values` before
transformers 5.25, `cache` since; verl's venv pins 5.10). Shared by the engine's batches and the trainer's
shared-prefix pass."""

from __future__ import annotations

import functools
import inspect

import torch


@functools.cache
def cache_keyword(module_type: type) -> str:
    """The keyword `module_type.forward` takes its cache under."""
    return "cache" if "cache" in inspect.signature(module_type.forward).parameters else "past_key_values"


def forward_with_cache(module: torch.nn.Module, cache: object, **inputs: object):
    """Calls `module` with `cache` (filled in place) and `use_cache=True`."""
    return module(**inputs, **{cache_keyword(type(module)): cache}, use_cache=True)
