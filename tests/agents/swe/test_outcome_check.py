"""Whether a run's outcomes can be believed (pure): one document on the pipe, the sentinel, and pytest's exit status
agreeing with the outcomes; and which configuration file the runner hands pytest."""

from __future__ import annotations

import json
import os

import pytest

from agents.swe import pytest_outcomes, testrun
from agents.swe.outcome_check import SENTINEL_PREFIX, disagreement, parse_document, split_sentinel
from agents.swe.testrun import config_file, files_of_tests, pytest_args

SENTINEL = {f"{SENTINEL_PREFIX}ab12.py::test_must_pass": "passed",
            f"{SENTINEL_PREFIX}ab12.py::test_must_fail": "failed"}


def document(outcomes: dict[str, str], exitstatus: int = 1) -> bytes:
    return json.dumps({"outcomes": outcomes, "messages": {}, "exitstatus": exitstatus}).encode()


def test_an_honest_run_agrees():
    raw = document({"t.py::a": "passed", "t.py::b": "skipped", **SENTINEL})
    parsed = parse_document(raw)
    assert disagreement(parsed, 1, sentinel=True) is None
    assert split_sentinel(parsed.outcomes)[0] == {"t.py::a": "passed", "t.py::b": "skipped"}
    assert disagreement(parse_document(document({"t.py::a": "passed"}, 0)), 0, sentinel=False) is None


@pytest.mark.parametrize(("raw", "returncode", "reason"), [
    (b"", 1, "wrote nothing"),
    (document({**SENTINEL}) + document({}, 0), 1, "not one JSON document"),  # a second writer on the pipe
    (b"junk" + document({**SENTINEL}), 1, "not one JSON document"),
    (json.dumps({"outcomes": {"a": "passed"}}).encode(), 1, "shape"),
    (json.dumps({"outcomes": {"a": "won"}, "messages": {}, "exitstatus": 0}).encode(), 0, "shape"),
    (document({"t.py::a": "passed"}), 1, "sentinel"),  # the sentinel is missing
    (document({"t.py::a": "passed", **SENTINEL, f"{SENTINEL_PREFIX}ab12.py::test_must_fail": "passed"}, 0), 0,
     "sentinel"),  # every report rewritten to passed
    (document({"t.py::a": "passed", **SENTINEL}), 0, "exit status disagrees"),  # os._exit(0) after the session
    (document({"t.py::a": "passed", **SENTINEL}, 0), 1, "exit status disagrees"),  # the plugin was told otherwise
    (document({"t.py::a": "passed", **SENTINEL}), 2, "exit status disagrees"),  # interrupted
    (document({"t.py::a": "passed", **SENTINEL}), -11, "exit status disagrees"),  # crashed
])
def test_disagreements_name_what_disagrees(raw, returncode, reason):
    problem = disagreement(parse_document(raw), returncode, sentinel=True)
    assert problem is not None and reason in problem, problem


@pytest.mark.parametrize(("files", "chosen"), [
    ({}, None),
    ({"pyproject.toml": "[project]\nname = 'x'\n"}, None),  # no pytest table: not pytest's configuration
    ({"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n"}, "pyproject.toml"),
    ({"setup.cfg": "[metadata]\nname = x\n", "tox.ini": "[pytest]\n"}, "tox.ini"),
    ({"setup.cfg": "[tool:pytest]\n", "tox.ini": "[tox]\n"}, "setup.cfg"),
    ({"pytest.ini": "", "pyproject.toml": "[tool.pytest.ini_options]\n"}, "pytest.ini"),
    ({".pytest.ini": "[pytest]\n", "tox.ini": "[pytest]\n"}, ".pytest.ini"),
    ({"setup.cfg": "[tool:pytest\nbroken"}, None),
])
def test_the_configuration_handed_to_pytest_is_the_repositorys_root_one_as_pytest_would_choose(tmp_path, files,
                                                                                               chosen):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert config_file(tmp_path) == (tmp_path / chosen if chosen else None)


def test_pytest_arguments_pin_the_configuration_rootdir_and_conftest_cut(tmp_path):
    args = pytest_args(tmp_path / "repo", tmp_path / "runner", ["t.py::a", "t.py::b"], tmp_path / "runner" / "s.py")
    assert args[:2] == ["-c", str(tmp_path / "runner" / "pytest.ini")]
    assert f"--rootdir={tmp_path / 'repo'}" in args and f"--confcutdir={tmp_path / 'repo'}" in args
    assert args[-2:] == ["t.py", str(tmp_path / "runner" / "s.py")]
    assert files_of_tests(["a.py::x", "b.py::y[1::2]", "a.py::z", "c.py"]) == ["a.py", "b.py", "c.py"]


def test_the_plugin_keeps_the_sentinel_the_checker_expects():
    assert pytest_outcomes.SENTINEL_PREFIX == SENTINEL_PREFIX


def test_the_outcomes_pipe_keeps_a_bounded_prefix_and_a_flood_is_not_a_document(monkeypatch):
    monkeypatch.setattr(testrun, "MAX_DOCUMENT_BYTES", 64)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, document({}, 0) + b" " * 200)
    os.close(write_fd)
    chunks: list[bytes] = []
    testrun._drain(read_fd, chunks)
    assert sum(map(len, chunks)) <= 65 and chunks[-1] == b"\0"
    assert "not one JSON document" in (parse_document(b"".join(chunks)).problem or "")
