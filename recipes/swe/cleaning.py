"""The cleaning steps of the SWE data pipeline, each a pure function from normalised rows to a `StepResult`.

Rows follow the normalised instance schema of `recipes.swe.instances` (instance_id, problem_statement, FAIL_TO_PASS,
PASS_TO_PASS as lists, ...). A step never edits a row: it keeps or drops it and says why, so the flow can log the
counts and the dropped ids of every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
DEFAULT_MAX_TESTS = 200  # the paper drops tasks with more tests than this (FAIL_TO_PASS + PASS_TO_PASS)


@dataclass(frozen=True)
class StepResult:
    """What one cleaning step kept and dropped."""

    name: str  # the step's name, e.g. "drop_empty_statements"
    kept: list[Row]  # the rows kept, in input order
    dropped: list[tuple[str, str]]  # (instance_id, reason) of each dropped row, in input order

    @property
    def n_in(self) -> int:
        """Rows the step received."""
        return len(self.kept) + len(self.dropped)

    def counts(self) -> dict[str, int]:
        """{"in", "kept", "dropped"} row counts."""
        return {"in": self.n_in, "kept": len(self.kept), "dropped": len(self.dropped)}


def _split(name: str, rows: Sequence[Row], reason_of) -> StepResult:
    kept: list[Row] = []
    dropped: list[tuple[str, str]] = []
    for row in rows:
        reason = reason_of(row)
        if reason is None:
            kept.append(row)
        else:
            dropped.append((str(row.get("instance_id")), reason))
    return StepResult(name, kept, dropped)


def drop_empty_statements(rows: Sequence[Row]) -> StepResult:
    """Drops rows whose problem_statement is missing, not text, or only whitespace."""
    def reason(row: Row) -> str | None:
        statement = row.get("problem_statement")
        if not isinstance(statement, str):
            return f"problem_statement is {type(statement).__name__}, not text"
        return None if statement.strip() else "problem_statement is empty"

    return _split("drop_empty_statements", rows, reason)


def drop_missing_environment(rows: Sequence[Row], availability: Mapping[str, bool],
                             reasons: Mapping[str, str] | None = None) -> StepResult:
    """Drops rows whose environment (image, branch or local base) the backend reported missing.

    `availability` maps every row's instance_id to the backend's answer; a row without an answer is an error
    (ask the backend about all rows), not a silent drop. `reasons` (the backend's `last_reasons`) details the drops.
    """
    unanswered = [row.get("instance_id") for row in rows if row.get("instance_id") not in availability]
    if unanswered:
        raise ValueError(f"the environment backend gave no answer for {len(unanswered)} instance(s), e.g. "
                         f"{unanswered[:5]}; pass the availability of every row (backend.available(rows))")
    def reason(row: Row) -> str | None:
        if availability[row["instance_id"]]:
            return None
        detail = (reasons or {}).get(row["instance_id"])
        return f"environment missing: {detail}" if detail else "environment missing"

    return _split("drop_missing_environment", rows, reason)


def n_tests(row: Row) -> int:
    """FAIL_TO_PASS + PASS_TO_PASS tests of a row (missing lists count as empty)."""
    return len(row.get("FAIL_TO_PASS") or []) + len(row.get("PASS_TO_PASS") or [])


def drop_too_many_tests(rows: Sequence[Row], max_tests: int = DEFAULT_MAX_TESTS) -> StepResult:
    """Drops rows with more than `max_tests` tests (FAIL_TO_PASS + PASS_TO_PASS)."""
    if max_tests < 1:
        raise ValueError(f"max_tests={max_tests} must be >= 1 (the paper uses {DEFAULT_MAX_TESTS})")

    def reason(row: Row) -> str | None:
        count = n_tests(row)
        return f"{count} tests > {max_tests}" if count > max_tests else None

    return _split("drop_too_many_tests", rows, reason)


def step_counts(results: Sequence[StepResult]) -> dict[str, dict[str, int]]:
    """Each step's counts by step name, in pipeline order (what the manifest records)."""
    return {result.name: result.counts() for result in results}
