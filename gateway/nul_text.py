"""Text that may hold NUL characters, stored losslessly in a text column of either store.

PostgreSQL's text columns cannot hold U+0000 (the insert fails); SQLite's can. The engine's output (a call's
`response_text`, `error`, `finish_reason`, `response_id`) and the texts built from it (a rollout's `error`) may
carry one, so every such column is written through `to_column` and read back through `from_column`, on both stores
alike (the stored form is the same on SQLite and PostgreSQL):

- a text with no NUL that does not start with `MARK` is stored as it is (the common case: one `in` test, no copy);
- any other text is stored as `MARK` followed by its JSON string literal (orjson: NUL becomes the six characters
  `\\u0000`), which `from_column` decodes back to the exact text.

A text that itself starts with `MARK` is escaped too, so no stored text is ever read back as anything but itself.
A name the harness sends (a call's `model`) is refused with a NUL instead (400, `refuse_nul`): it is an identifier,
not output to keep.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import BadRequest

MARK = "\x1bharnessrl-json:"
"""The prefix of an escaped text (ESC, which no engine text is expected to start with, then a name)."""


def to_column(text: str | None) -> str | None:
    """`text` as stored in a text column: itself, or escaped when it holds a NUL or starts with `MARK`."""
    if text is None or ("\x00" not in text and not text.startswith(MARK)):
        return text
    return MARK + orjson.dumps(text).decode()


def from_column(stored: str | None) -> str | None:
    """The exact text `to_column` stored."""
    if stored is None or not stored.startswith(MARK):
        return stored
    return orjson.loads(stored[len(MARK):])


def escape_columns(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`row` with its text columns `names` passed through `to_column` (a copy only when one changes)."""
    changed = {name: to_column(row[name]) for name in names if isinstance(row.get(name), str)}
    changed = {name: value for name, value in changed.items() if value is not row[name]}
    return {**row, **changed} if changed else row


def refuse_nul(value: str, field: str) -> None:
    """400 naming `field` when the harness-provided string `value` holds a NUL character."""
    if "\x00" in value:
        raise BadRequest(f"'{field}' holds a NUL character (U+0000), which no {field} may contain; send it without "
                         "one", param=field)
