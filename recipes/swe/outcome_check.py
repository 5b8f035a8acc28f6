"""Whether a pytest run's outcomes can be believed (pure): the outcomes document, pytest's exit status and the
grader's sentinel tests must all tell the same story.

The sentinel is a test file of the grader's, outside the repository, with one test that must pass and one that must
fail: code under test that rewrites every report to "passed" (a plugin, a patched `_pytest`) turns the failing one
green. Because that test fails, the only honest exit status of a sentinel run is 1 (TESTS_FAILED).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

SENTINEL_PREFIX = "test_harnessrl_sentinel_"  # the sentinel file's name starts with this (a random suffix follows)
SENTINEL_PASS = "test_must_pass"
SENTINEL_FAIL = "test_must_fail"
SENTINEL_SOURCE = f"def {SENTINEL_PASS}():\n    assert True\n\n\ndef {SENTINEL_FAIL}():\n    assert False\n"
EXIT_OK, EXIT_TESTS_FAILED = 0, 1  # pytest's ExitCode.OK and ExitCode.TESTS_FAILED


@dataclass(frozen=True)
class OutcomeDocument:
    """What the outcomes plugin wrote, or why it cannot be read."""

    outcomes: dict[str, str]  # node id -> passed | failed | skipped
    messages: dict[str, str]  # node id -> failure message
    exitstatus: int | None  # the exit status pytest reported to the plugin
    problem: str | None = None  # why the stream is not one well-formed document (None when it is)
    xfailed: frozenset[str] = frozenset()  # node ids that failed as their xfail mark expected (reported skipped)


def parse_document(raw: bytes) -> OutcomeDocument:
    """The single JSON document the plugin wrote to its pipe; anything else in the stream is a problem."""
    if not raw:
        return OutcomeDocument({}, {}, None, "the outcomes plugin wrote nothing (pytest did not finish its session)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # undecodable, not JSON, too deep, an integer past the digit limit
        return OutcomeDocument({}, {}, None, f"the outcomes stream is not one JSON document ({error}): something "
                                             "besides the plugin wrote to it")
    valid = isinstance(data, dict) and isinstance(data.get("outcomes"), dict) and \
        isinstance(data.get("messages"), dict) and isinstance(data.get("exitstatus"), int) and \
        all(isinstance(k, str) and v in ("passed", "failed", "skipped") for k, v in data["outcomes"].items()) and \
        isinstance(xfailed := data.get("xfailed", []), list) and all(isinstance(node, str) for node in xfailed)
    if not valid:
        return OutcomeDocument({}, {}, None, "the outcomes document does not have the plugin's shape")
    return OutcomeDocument(data["outcomes"], {str(k): str(v) for k, v in data["messages"].items()},
                           data["exitstatus"], xfailed=frozenset(xfailed))


def split_sentinel(outcomes: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the repository's outcomes, the sentinel's outcomes by test name)."""
    own = {node: seen for node, seen in outcomes.items() if SENTINEL_PREFIX not in node}
    sentinel = {node.rsplit("::", 1)[-1]: seen for node, seen in outcomes.items() if SENTINEL_PREFIX in node}
    return own, sentinel


def rewritten(document: OutcomeDocument) -> bool:
    """Whether a well-formed document reports the grader's failing sentinel test as anything but failed: evidence that
    the report machinery was rewritten (a crash, a second writer or an odd exit status cannot do that: they leave no
    document, a malformed stream or a status that disagrees)."""
    _, seen = split_sentinel(document.outcomes)
    return document.problem is None and SENTINEL_FAIL in seen and seen[SENTINEL_FAIL] != "failed"


def disagreement(document: OutcomeDocument, returncode: int, *, sentinel: bool) -> str | None:
    """Why the run's outcomes, exit status and sentinel disagree (None when they agree)."""
    if document.problem is not None:
        return document.problem
    _, seen = split_sentinel(document.outcomes)
    if sentinel and (seen.get(SENTINEL_PASS), seen.get(SENTINEL_FAIL)) != ("passed", "failed"):
        return (f"the grader's sentinel tests were reported {seen or 'missing'} instead of {SENTINEL_PASS}: passed, "
                f"{SENTINEL_FAIL}: failed: something in the tested code rewrites test reports")
    expected = EXIT_TESTS_FAILED if "failed" in document.outcomes.values() else EXIT_OK
    if document.exitstatus != expected or returncode != expected:
        return (f"pytest exited {returncode} (it told the plugin {document.exitstatus}) but the outcomes call for "
                f"{expected}: the exit status disagrees with the reported outcomes")
    return None
