"""Incremental detokenisation of one choice with stop-string matching, as vLLM reports text.

The visible text is the decode of all sampled tokens with special tokens skipped, cut before the first
stop string (unless the stop string is to be included). While streaming, text that could still become a stop
string or that ends in an incomplete UTF-8 sequence is held back until it is settled.
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT_CHAR = "\ufffd"


class ChoiceText:
    """Text state of one generating choice."""

    def __init__(self, decode: Callable[[list[int]], str], stops: tuple[str, ...],
                 include_stop: bool = False) -> None:
        self._decode = decode
        self._stops = tuple(s for s in stops if s)
        self._include_stop = include_stop
        self._holdback_chars = 0 if include_stop else max((len(s) for s in self._stops), default=1) - 1
        self._token_ids: list[int] = []
        self._text = ""
        self._emitted = ""
        self.matched_stop: str | None = None
        """The stop string that ended the text, once one matched."""

    @property
    def text(self) -> str:
        """The visible text so far (final once a stop matched or generation ended)."""
        return self._text

    def append(self, token_id: int) -> str | None:
        """Adds a sampled token; returns the stop string it completed, if any (later tokens are ignored)."""
        if self.matched_stop is not None:
            return self.matched_stop
        self._token_ids.append(token_id)
        full = self._decode(self._token_ids)
        self._text = full
        match = _earliest_stop(full, self._stops)
        if match is not None:
            position, stop = match
            self._text = full[: position + (len(stop) if self._include_stop else 0)]
            self.matched_stop = stop
        return self.matched_stop

    def take_delta(self, final: bool) -> str:
        """Text that became settled since the last call; everything left when `final`."""
        settled = self._text
        if not final and self.matched_stop is None:
            settled = settled.rstrip(REPLACEMENT_CHAR) if settled.endswith(REPLACEMENT_CHAR) else settled
            if self._holdback_chars:
                settled = settled[: max(len(self._emitted), len(settled) - self._holdback_chars)]
        if not settled.startswith(self._emitted):
            return ""
        delta = settled[len(self._emitted):]
        self._emitted = settled
        return delta


def _earliest_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """(position, stop) of the stop string occurring first in `text`, or None."""
    best: tuple[int, str] | None = None
    for stop in stops:
        position = text.find(stop)
        if position != -1 and (best is None or position < best[0]):
            best = (position, stop)
    return best
