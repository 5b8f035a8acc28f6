"""Whether a run's outcomes can be believed (pure): one document on the pipe, the sentinel, and pytest's exit status
agreeing with the outcomes; which configuration file the runner hands pytest; the canary rounds merged (locally and from
the grading pod's verdict line)."""

from __future__ import annotations

import json
import os

import pytest

from recipes.swe import pytest_outcomes, testrun
from recipes.swe.grading_job_pod import round_record, verdict_line
from recipes.swe.kube_grading_swe import read_verdict
from recipes.swe.outcome_check import SENTINEL_PREFIX, disagreement, parse_document, rewritten, split_sentinel
from recipes.swe.testrun import config_file, files_of_tests, pytest_args

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
    (b"[" * 5000, 1, "not one JSON document"),  # nested past the decoder's recursion limit
    (b'{"outcomes": {}, "messages": {}, "exitstatus": ' + b"1" * 5000 + b"}", 1, "not one JSON document"),  # digits
])
def test_disagreements_name_what_disagrees(raw, returncode, reason):
    problem = disagreement(parse_document(raw), returncode, sentinel=True)
    assert problem is not None and reason in problem, problem


REWRITTEN_FAIL = {**SENTINEL, f"{SENTINEL_PREFIX}ab12.py::test_must_fail": "passed"}


@pytest.mark.parametrize(("raw", "evidence"), [
    (document({"t.py::a": "passed", **REWRITTEN_FAIL}, 0), True),  # every report rewritten to passed
    (document({"t.py::a": "passed", **SENTINEL, f"{SENTINEL_PREFIX}ab12.py::test_must_fail": "skipped"}, 0), True),
    (b"", False),  # the process died before the plugin wrote
    (document({**SENTINEL}) + document({**SENTINEL}), False),  # a forked child wrote a second document
    (b"[" * 5000, False),
    (document({"t.py::a": "passed"}), False),  # the sentinel missing: the session ended early
    (document({"t.py::a": "passed", **SENTINEL}), False),  # honest outcomes (whatever the exit status)
])
def test_only_a_rewritten_sentinel_is_evidence_of_rewritten_reports(raw, evidence):
    assert rewritten(parse_document(raw)) is evidence


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


def _round(outcomes: dict[str, str], problem: str | None = None, timed_out: bool = False,
           forged: bool = False) -> testrun.TestRun:
    return testrun.TestRun(outcomes=outcomes, messages={t: f"{t} failed" for t, o in outcomes.items() if o == "failed"},
                           output_tail="tail", returncode=1, problem=problem, timed_out=timed_out, forged=forged)


def test_rounds_merge_to_the_real_outcomes_and_a_bad_round_or_canary_is_the_problem():
    roles = [{"t.py::a": "real", "t.py::b": "canary"}, {"t.py::a": "canary", "t.py::b": "real"}]
    honest = testrun.merge_rounds(roles, [_round({"t.py::a": "failed", "t.py::b": "failed"}),
                                          _round({"t.py::a": "failed", "t.py::b": "passed"})])
    assert honest.problem is None and honest.outcomes == {"t.py::a": "failed", "t.py::b": "passed"}
    assert honest.messages == {"t.py::a": "t.py::a failed"}  # the canary's failure is not the test's message
    forged = testrun.merge_rounds(roles, [_round({"t.py::a": "passed", "t.py::b": "passed"}),
                                          _round({"t.py::a": "passed", "t.py::b": "passed"})])
    assert forged.problem is not None and "canary of t.py::b in round 1 of 2" in forged.problem
    assert forged.forged and not honest.forged  # a canary not reported failed is evidence
    bad = testrun.merge_rounds(roles, [_round({}), _round({}, problem="the sentinel ...")])
    assert bad.problem == "round 2 of 2: the sentinel ..." and not bad.forged  # a round's problem is as it says
    assert testrun.merge_rounds(roles, [_round({}), _round({}, problem="the guard ...", forged=True)]).forged
    late = testrun.merge_rounds(roles, [_round({}, timed_out=True), _round({"t.py::a": "passed"})])
    assert late.timed_out and late.problem is None


def _pod_round(outcomes: dict[str, str], roles: dict[str, str]) -> dict:
    return round_record(1, False, document({**outcomes, **SENTINEL}), "tail", roles)


def test_the_pods_rounds_are_read_as_local_rounds_and_malformed_rounds_are_a_problem():
    nonce, roles = "ab" * 16, [{"t.py::a": "real"}, {"t.py::a": "canary"}]
    honest = [_pod_round({"t.py::a": "passed"}, roles[0]), _pod_round({"t.py::a": "failed"}, roles[1])]
    run = read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=honest), nonce)
    assert run.problem is None and run.outcomes == {"t.py::a": "passed"}
    forged = [honest[0], _pod_round({"t.py::a": "passed"}, roles[1])]
    assert "canary" in (read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=forged), nonce).problem or "")
    for rounds in ([], [honest[0], _pod_round({"t.py::b": "failed"}, {"t.py::b": "canary"})]):
        problem = read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=rounds), nonce).problem
        assert problem is not None and "malformed" in problem, problem


def test_a_pod_verdict_is_evidence_of_forgery_only_when_something_was_rewritten_or_forged():
    """What the forgery probe reads (`TestRun.forged`): a canary, a rewritten sentinel, the guard's status, a second
    verdict line or another nonce are evidence; a round the tested code crashed or interrupted is not."""
    nonce, roles = "ab" * 16, [{"t.py::a": "real"}, {"t.py::a": "canary"}]
    honest = [_pod_round({"t.py::a": "passed"}, roles[0]), _pod_round({"t.py::a": "failed"}, roles[1])]
    line = verdict_line(nonce, 1, False, b"", "", rounds=honest)
    assert not read_verdict(line, nonce).forged
    forged = [honest[0], _pod_round({"t.py::a": "passed"}, roles[1])]
    assert read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=forged), nonce).forged
    rewritten_round = round_record(0, False, document({"t.py::a": "passed", **REWRITTEN_FAIL}, 0), "", roles[1])
    assert read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=[honest[0], rewritten_round]), nonce).forged
    guarded = round_record(86, False, b"", "harnessrl verdict guard: sys.settrace", roles[1])
    assert read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=[honest[0], guarded]), nonce).forged
    assert read_verdict(f"{line}\n{line}", nonce).forged
    assert read_verdict(line, "cd" * 16).forged
    for returncode, raw in ((-6, b""), (-14, document({"t.py::a": "failed", **SENTINEL})), (1, b"[" * 5000)):
        crashed = round_record(returncode, False, raw, "", roles[1])
        run = read_verdict(verdict_line(nonce, 1, False, b"", "", rounds=[honest[0], crashed]), nonce)
        assert run.problem is not None and not run.forged, (returncode, run.problem)
