"""A self-contained pytest plugin, registered as an object by the grader's launcher (`testrun.LAUNCHER`): at the end
of the session it writes {"outcomes": {node id: outcome}, "messages": {...}, "exitstatus": n} as ONE JSON document to
the file descriptor in `OUTPUT_FD` (a pipe the grader reads) and closes it, so nothing written to the pipe before or
after that document goes unnoticed. Outcomes: passed, failed, skipped (xfail counts as skipped, xpass as passed); a
failing setup or teardown fails the test; a module that fails to collect is reported failed under its node id.
Failure messages (the crash line, truncated) go under "messages"; the tests that failed as their xfail mark
expected under "xfailed" (so that a canary round can tell an expected failure from a skip).

The tests to run come as `WANTED` (their files are pytest's arguments; the rest is deselected here).
It imports nothing of harnessrl (it runs inside the tested project's interpreter) and is copied into a directory of
the grader's before each run: the repository under test never provides it.
"""

from __future__ import annotations

import json
import os

MESSAGE_CHARS = 400
SENTINEL_PREFIX = "test_harnessrl_sentinel_"  # the grader's sentinel file (outside the rootdir): always kept
OUTPUT_FD: int | None = None  # set by the launcher before pytest starts
WANTED: frozenset[str] | None = None  # node ids (or files) to run, set by the launcher; None runs what was collected
_outcomes: dict[str, str] = {}
_messages: dict[str, str] = {}
_xfailed: set[str] = set()  # tests whose call failed as their xfail mark expected (reported skipped)


def _node(report) -> str:
    """The report's node id; a test file outside the rootdir (the grader's sentinel) gets its file name in front."""
    if report.nodeid.startswith("::"):
        return os.path.basename(str(report.location[0])) + report.nodeid
    return report.nodeid


def _wanted(item) -> bool:
    return item.path.name.startswith(SENTINEL_PREFIX) or item.nodeid in WANTED or \
        item.nodeid.split("::", 1)[0] in WANTED


def pytest_collection_modifyitems(session, config, items) -> None:
    """Keep the wanted tests: they are selected here, not named on the command line, so that a test module that does
    not import is a collection error (the run goes on) rather than a usage error that runs nothing."""
    if WANTED is None:
        return
    kept = [item for item in items if _wanted(item)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if not _wanted(item)])
        items[:] = kept


def pytest_runtest_logreport(report) -> None:
    node = _node(report)
    previous = _outcomes.get(node)
    if report.when == "call" or report.failed or (report.skipped and previous is None):
        outcome = "skipped" if report.skipped else report.outcome
        if previous != "failed":
            _outcomes[node] = outcome
        if report.when == "call" and report.skipped and hasattr(report, "wasxfail"):
            _xfailed.add(node)
    if report.failed and node not in _messages:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr).splitlines()[-1:]
        _messages[node] = str(message)[:MESSAGE_CHARS]


def pytest_collectreport(report) -> None:
    if report.failed:  # a module that does not import: its tests never run, and pytest exits 1 for it
        _outcomes[report.nodeid or "<collection>"] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        _messages[report.nodeid or "<collection>"] = str(crash.message if crash else report.longrepr)[:MESSAGE_CHARS]


def pytest_sessionfinish(session, exitstatus) -> None:
    if OUTPUT_FD is None:
        return
    document = json.dumps({"outcomes": _outcomes, "messages": _messages, "exitstatus": int(exitstatus),
                           "xfailed": sorted(_xfailed)})
    data = document.encode("utf-8")
    while data:
        data = data[os.write(OUTPUT_FD, data):]
    os.close(OUTPUT_FD)
