"""A self-contained pytest plugin (loaded with `-p pytest_outcomes`): writes {node id: outcome} as JSON to the file
named by $HARNESSRL_PYTEST_OUTCOMES. Outcomes: passed, failed, skipped (xfail counts as skipped, xpass as passed);
a failing setup or teardown fails the test. Failure messages (the crash line, truncated) go under "messages".

It imports nothing of harnessrl: it runs inside the tested project's interpreter.
"""

from __future__ import annotations

import json
import os

MESSAGE_CHARS = 400
_outcomes: dict[str, str] = {}
_messages: dict[str, str] = {}


def pytest_runtest_logreport(report) -> None:
    previous = _outcomes.get(report.nodeid)
    if report.when == "call" or report.failed or (report.skipped and previous is None):
        outcome = "skipped" if report.skipped else report.outcome
        if previous != "failed":
            _outcomes[report.nodeid] = outcome
    if report.failed and report.nodeid not in _messages:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr).splitlines()[-1:]
        _messages[report.nodeid] = str(message)[:MESSAGE_CHARS]


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get("HARNESSRL_PYTEST_OUTCOMES")
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"outcomes": _outcomes, "messages": _messages}, handle)
