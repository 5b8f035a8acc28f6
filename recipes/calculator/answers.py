"""The number a final answer states, pure: the last number in the model's final text.

A number is an optional minus sign, digits (thousands may be grouped with commas: `14,582`) and an optional decimal
part; it is read as an exact fraction, so `14582.0` states 14582. Text with no number, or whose last number is longer
than MAX_DIGITS digits, states none. Any text is accepted, hostile text too: nothing here raises.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_DIGITS = 40  # a longer number is no answer (and never reaches int/Fraction parsing limits)
MAX_SCANNED = 20_000  # characters at the end of the text searched (answers are short; the text may be huge)
NUMBER_RE = re.compile(r"(?<![0-9.,])-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?![0-9])")


def last_number_text(text: str) -> str | None:
    """The last number as written in `text` (None when there is none)."""
    if not isinstance(text, str):
        return None
    matches = NUMBER_RE.findall(text[-MAX_SCANNED:])
    return matches[-1] if matches else None


def stated_number(text: str) -> Fraction | None:
    """The value of the last number in `text`, or None when it states none (or one of more than MAX_DIGITS digits)."""
    written = last_number_text(text)
    if written is None:
        return None
    plain = written.replace(",", "")
    if sum(ch.isdigit() for ch in plain) > MAX_DIGITS:
        return None
    return Fraction(plain)
