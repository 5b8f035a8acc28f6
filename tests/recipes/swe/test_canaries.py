"""Canary rounds (pure): the sites node ids name, the balanced roles, the appended line placed where a test that
completes must run it (and nowhere that changes what the test checks), and the checks of the rounds' outcomes."""

from __future__ import annotations

import ast
import random

import pytest

from recipes.swe.canaries import (
    TestSite,
    canary_problem,
    check_line,
    merge_real,
    plan_rounds,
    real_outcomes,
    rewrite_source,
    role_of,
    site_of,
)

SOURCE = '''\
import pytest


def helper():
    return 1


def test_plain():
    x = helper()
    assert x == 1
    # a trailing comment


def test_early(flag=True):
    """Returns before its end."""
    if flag:
        return
    assert False


def test_one_liner(): assert helper() == 1


class TestGroup:
    def test_method(self):
        with pytest.raises(ZeroDivisionError):
            1 / 0

    class TestInner:
        @staticmethod
        def test_nested():
            def inner():
                return 2
            assert inner() == 2
'''
SCOPES = [("test_plain",), ("test_early",), ("test_one_liner",), ("TestGroup", "test_method"),
          ("TestGroup", "TestInner", "test_nested")]


@pytest.mark.parametrize(("test_id", "site"), [
    ("tests/t.py::test_a", TestSite("tests/t.py", ("test_a",))),
    ("tests/t.py::test_a[1-2::x]", TestSite("tests/t.py", ("test_a",))),
    ("t.py::C::D::test_m[p]", TestSite("t.py", ("C", "D", "test_m"))),
    ("t.py", None),
])
def test_a_node_id_names_its_definition_site(test_id, site):
    assert site_of(test_id) == site


def test_each_function_is_real_and_canary_in_balanced_rounds_and_the_lines_say_so():
    ids = ["t.py::test_a", "t.py::test_a[2]", "t.py::C::test_b", "u.py::test_c"]
    for rounds in (2, 3, 4):
        plans = plan_rounds(ids, rounds, random.Random(rounds))
        assert len(plans) == rounds
        for site in {site_of(i) for i in ids}:
            roles = [plan.roles[site] for plan in plans]
            assert roles.count("canary") == rounds // 2 and "real" in roles
            for plan in plans:
                holds = eval(compile(plan.lines[site].replace("assert ", "", 1), "<line>", "eval"))
                assert holds is (plan.roles[site] == "real")
    with pytest.raises(ValueError, match="at least 2 rounds"):
        plan_rounds(ids, 1, random.Random(0))


def test_the_two_lines_have_the_same_shape():
    rng = random.Random(7)
    real, canary = ast.parse(check_line("real", rng)), ast.parse(check_line("canary", rng))
    shape = [type(node).__name__ for node in ast.walk(real)]
    assert shape == [type(node).__name__ for node in ast.walk(canary)]


def _run(text: str) -> dict[str, bool]:
    """Which of SCOPES' functions complete when called."""
    namespace: dict = {}
    exec(compile(text, "t.py", "exec"), namespace)
    group = namespace["TestGroup"]
    calls = {"test_plain": namespace["test_plain"], "test_early": namespace["test_early"],
             "test_one_liner": namespace["test_one_liner"], "test_method": lambda: group().test_method(),
             "test_nested": group.TestInner.test_nested}
    completed = {}
    for name, call in calls.items():
        try:
            call()
            completed[name] = True
        except AssertionError:
            completed[name] = False
    return completed


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_the_line_is_run_by_every_test_that_completes_and_changes_nothing_else(ending):
    source = SOURCE.replace("\n", ending)
    assert all(_run(source).values())
    rng = random.Random(1)
    real, placed = rewrite_source(source, {scope: check_line("real", rng) for scope in SCOPES})
    assert placed == frozenset(SCOPES) and all(_run(real).values())
    canary, _ = rewrite_source(source, {scope: check_line("canary", rng) for scope in SCOPES})
    assert not any(_run(canary).values())
    assert all(line.endswith(ending) for line in real.splitlines(keepends=True))
    assert real.count(ending) == canary.count(ending)  # the same layout in both roles
    original = source.splitlines()
    rewritten = real.splitlines()
    # a failing assertion keeps its line and text up to the first insertion (test_plain's last line)
    assert rewritten[: original.index("    assert x == 1") + 1] == original[: original.index("    assert x == 1") + 1]


def test_the_early_returning_test_gets_its_line_after_the_docstring():
    rewritten, _ = rewrite_source(SOURCE, {("test_early",): "assert 3 % 2 != 1"})
    function = next(n for n in ast.parse(rewritten).body if getattr(n, "name", "") == "test_early")
    assert ast.get_docstring(function) == "Returns before its end."
    assert ast.unparse(function.body[1]) == "assert 3 % 2 != 1"


def test_what_cannot_be_placed_is_left_alone():
    assert rewrite_source(SOURCE, {("test_missing",): "assert 1"}) == (SOURCE, frozenset())
    assert rewrite_source(SOURCE, {("TestGroup", "test_plain"): "assert 1"})[1] == frozenset()
    assert rewrite_source("def test_x(:\n", {("test_x",): "assert 1"}) == ("def test_x(:\n", frozenset())


def test_a_canary_reported_anything_but_failed_is_the_problem():
    roles = [{"t.py::a": "real", "t.py::b": "canary"}, {"t.py::a": "canary", "t.py::b": "real"}]
    honest = [{"t.py::a": "passed", "t.py::b": "failed"}, {"t.py::a": "failed", "t.py::b": "passed"}]
    assert canary_problem(roles, honest) is None
    assert real_outcomes(roles, honest) == {"t.py::a": "passed", "t.py::b": "passed"}
    forged = [{"t.py::a": "passed", "t.py::b": "passed"}, {"t.py::a": "failed", "t.py::b": "passed"}]
    problem = canary_problem(roles, forged)
    assert problem is not None and "canary of t.py::b in round 1 of 2" in problem and "reported passed" in problem
    skipped_both = [{"t.py::a": "skipped", "t.py::b": "failed"}, {"t.py::a": "skipped", "t.py::b": "passed"}]
    assert canary_problem(roles, skipped_both) is None  # a test this environment skips, in both roles
    skipped_canary = [{"t.py::a": "passed", "t.py::b": "failed"}, {"t.py::a": "skipped", "t.py::b": "passed"}]
    assert "reported skipped" in (canary_problem(roles, skipped_canary) or "")
    assert canary_problem(roles, [{}, {}]) is None  # nothing collected: nothing passes either
    assert real_outcomes(roles, [{"<collection>": "failed"}, {}]) == {"<collection>": "failed"}


def test_an_xfail_marked_canary_failing_as_its_mark_expects_is_no_problem():
    """An xfail-marked test whose body passes (xpass) in its real round: its canary fails, which pytest reports as an
    expected failure (skipped); the plugin names it in `xfailed`, so it is a canary doing its job, not a forged skip."""
    roles = [{"t.py::x": "real"}, {"t.py::x": "canary"}]
    rounds = [{"t.py::x": "passed"}, {"t.py::x": "skipped"}]
    assert "reported skipped" in (canary_problem(roles, rounds) or "")  # without the plugin's word
    assert canary_problem(roles, rounds, [frozenset(), frozenset({"t.py::x"})]) is None
    assert canary_problem(roles, [{"t.py::x": "passed"}, {"t.py::x": "passed"}],
                          [frozenset(), frozenset({"t.py::x"})]) is not None  # a canary reported passed still is


def test_real_rounds_merge_to_the_worst_and_unplaced_tests_are_real_everywhere():
    assert merge_real(["passed", "passed"]) == "passed"
    assert merge_real(["passed", "skipped"]) == "skipped"
    assert merge_real(["skipped", "failed"]) == "failed"
    assert merge_real(["passed", None]) == "failed"
    assert merge_real([None, None]) is None
    plan = plan_rounds(["t.py::test_a"], 2, random.Random(0))[0]
    site = TestSite("t.py", ("test_a",))
    assert role_of(plan, "t.py::test_a", frozenset({site})) == "real"
    assert role_of(plan, "t.py::test_a", frozenset()) == plan.roles[site]
    assert role_of(plan, "t.py", frozenset()) == "real"
