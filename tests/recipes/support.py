"""Helpers for recipe tests: call records as the gateway stores them, mutations of task rows, the check that a
validation report caught a bad row."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.records import CallRecord
from rollouts.expectations import DataValidationError, ValidationReport, require_valid


def call_record(seq: int, text: str | None, status: str = "ok") -> CallRecord:
    """A chat call of rollout "r" whose first choice's text is `text`."""
    return CallRecord(id=seq, rollout_id="r", attempt=0, seq=seq, kind="chat", stream=False, model="policy",
                      upstream=None, status=status, http_status=200, error=None, request={}, response_raw=None,
                      response_id=None, prompt_token_ids=[], response_token_ids=[], response_logprobs=[],
                      response_text=text, finish_reason="stop", n_choices=1, policy_version=0, latency_ms=1.0,
                      created_at=0.0)


def set_value(index: int, key: str, value) -> Callable[[list[dict]], None]:
    """A mutation of a list of rows: row `index`'s `key` set to `value`."""
    def mutate(rows: list[dict]) -> None:
        rows[index][key] = value
    return mutate


def duplicate_value(index: int, key: str, source: int) -> Callable[[list[dict]], None]:
    """A mutation of a list of rows: row `index`'s `key` set to row `source`'s (a duplicate)."""
    def mutate(rows: list[dict]) -> None:
        rows[index][key] = rows[source][key]
    return mutate


def drop_everywhere(key: str) -> Callable[[list[dict]], None]:
    """A mutation of a list of rows: `key` removed from every row."""
    def mutate(rows: list[dict]) -> None:
        for row in rows:
            del row[key]
    return mutate


def assert_caught(report: ValidationReport, rule: str, row_id: str, words: str) -> None:
    """`report` fails `rule`, and its failure, and the error require_valid raises, name `row_id` and the rule's
    `words`."""
    failed = {r.name: r for r in report.failures()}
    assert not report.success and rule in failed, report.to_markdown()
    assert row_id in failed[rule].unexpected_ids
    assert words in failed[rule].message and row_id in failed[rule].message
    with pytest.raises(DataValidationError) as raised:
        require_valid(report)
    assert words in str(raised.value) and row_id in str(raised.value)
