"""Prefix caching: the KV cache of prompts and finished rows, reused by later prompts that start with the same tokens.

An agent's next call re-sends its whole conversation: without reuse, every call prefills its history again, and on a
CPU that prefill is most of the engine's work (multistep validation: 37k prompt tokens for 6k generated). When a row
finishes, its cache (the prompt and every generated token fed back, so all but the last one) is kept here, keyed by
those tokens. A new prompt reuses the longest common prefix with any kept entry (a key's KV at position i depends on
its tokens up to i only, so a cut entry is exact) and prefills only the rest. A prompt's KV is kept as soon as it is
prefilled, so that the other rollouts of a group, whose prompts arrive while it generates, run only their last token;
an entry that a new one extends is dropped. Entries are evicted least recently used
first, under a budget of cached tokens. Every weight operation clears the cache (KV of old weights is not the new
policy's), and so does a change of the weights' policy version.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import torch

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per decoder layer (keys, values) of ONE row, shape [1, H, T, D], no padding."""


@dataclass(frozen=True)
class PrefixHit:
    """A reusable prefix of a prompt."""

    layers: Layers
    """The entry's KV, cut to `length` positions."""
    length: int
    """Prompt tokens whose KV is reused (at least 1, at most len(prompt) - 1)."""


@dataclass
class PrefixCacheStats:
    """Counters since start (shown on /health)."""

    queried_tokens: int = 0
    """Prompt tokens of every lookup."""
    hit_tokens: int = 0
    """Prompt tokens whose KV was reused instead of prefilled."""
    stored_entries: int = 0
    """Entries stored."""
    evicted_entries: int = 0
    """Entries evicted for the token budget."""
    replaced_entries: int = 0
    """Entries dropped because a new entry extends them (a prompt's entry when its row finishes)."""
    clears: int = 0
    """Times the cache was emptied (weight operations, policy version changes)."""


def common_prefix_len(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> int:
    """Number of leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """LRU of prompts' and finished rows' KV caches under a token budget; used from the generation thread only."""

    def __init__(self, max_tokens: int, min_reuse_tokens: int = 16) -> None:
        if max_tokens < 0:
            raise ValueError(f"PrefixCache max_tokens={max_tokens}; use 0 (off) or a positive token budget")
        self.max_tokens = max_tokens
        self.min_reuse_tokens = max(1, min_reuse_tokens)
        """Shorter common prefixes are prefilled with the rest of the batch (a separate pass costs more)."""
        self.stats = PrefixCacheStats()
        self._entries: collections.OrderedDict[tuple[int, ...], Layers] = collections.OrderedDict()
        self._tokens = 0
        self._version: int | None = None

    @property
    def enabled(self) -> bool:
        """False when the budget is 0."""
        return self.max_tokens > 0

    @property
    def cached_tokens(self) -> int:
        """Tokens held."""
        return self._tokens

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drops every entry."""
        if self._entries:
            self.stats.clears += 1
        self._entries.clear()
        self._tokens = 0

    def sync_version(self, version: int) -> None:
        """Clears the cache when the weights' policy version is not the one its entries were computed with."""
        if self._version != version:
            self.clear()
            self._version = version

    def _longest(self, prompt: list[int]) -> tuple[tuple[int, ...] | None, int]:
        """The entry sharing the longest prefix with `prompt`, and the reusable length (at most len(prompt) - 1)."""
        best_key, best = None, 0
        for key in self._entries:
            shared = common_prefix_len(key, prompt)
            if shared > best:
                best_key, best = key, shared
        return best_key, min(best, len(prompt) - 1)  # the last prompt token is always run: its logits start the answer

    def reusable_len(self, prompt: list[int]) -> int:
        """Prompt tokens a lookup would reuse now (0 when below `min_reuse_tokens`), without counting or touching."""
        if not self.enabled:
            return 0
        best = self._longest(prompt)[1]
        return best if best >= self.min_reuse_tokens else 0

    def lookup(self, prompt: list[int]) -> PrefixHit | None:
        """The longest reusable prefix of `prompt` among the entries (marked recently used), or None."""
        if not self.enabled:
            return None
        self.stats.queried_tokens += len(prompt)
        best_key, best = self._longest(prompt)
        if best_key is None or best < self.min_reuse_tokens:
            return None
        self._entries.move_to_end(best_key)
        self.stats.hit_tokens += best
        layers = [(k[:, :, :best], v[:, :, :best]) for k, v in self._entries[best_key]]
        return PrefixHit(layers, best)

    def store(self, tokens: list[int], layers: Layers) -> None:
        """Keeps `layers` (the KV of exactly `tokens`), evicting the least recently used entries over budget."""
        if not self.enabled or len(tokens) < self.min_reuse_tokens or len(tokens) > self.max_tokens:
            return
        length = int(layers[0][0].shape[2])
        if length != len(tokens):
            raise ValueError(f"PrefixCache.store: {len(tokens)} tokens but a KV of {length} positions")
        key = tuple(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        for shorter in [old for old in self._entries if len(old) < len(key) and key[:len(old)] == old]:
            del self._entries[shorter]  # every lookup it would serve, the new entry serves as well
            self._tokens -= len(shorter)
            self.stats.replaced_entries += 1
        self._entries[key] = layers
        self._tokens += len(key)
        self.stats.stored_entries += 1
        while self._tokens > self.max_tokens:
            old, _ = self._entries.popitem(last=False)
            self._tokens -= len(old)
            self.stats.evicted_entries += 1
