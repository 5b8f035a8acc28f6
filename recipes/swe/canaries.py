"""Canary rounds (pure): the graded tests run in several rounds, each on a copy of the checkout of its own, and in each
round the grader appends ONE line to every graded test function: in the function's real rounds a line that passes,
in its canary rounds one that fails. Both are `assert A % M != R` with fresh random constants; only the constants
tell them apart. The node ids, files, line numbers, arguments and the grader's plugin are the same in every round, so
code under test that turns a failing test green (rewritten reports, swallowed assertions, emptied test functions, a
forged outcomes document) does the same to the canary of that test unless it reads or runs the test's own code to
tell the two lines apart; a canary reported anything but failed is tampering. The verdict of a test is taken from its
real rounds only.

The line goes after the function's last statement (a new line at the body's indentation, or `; line` for a one-line
body), so that a test that fails on the bug fails at the same assertion with the same message in both roles; a
function that can `return` early (a `return` or `yield` of its own) gets the line before its first statement instead.
A graded test whose function is not defined in its file under its node id's classes (inherited, generated) gets no
line and is real in every round (`unguarded`, `role_of`).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Role = Literal["real", "canary"]
Scope = tuple[str, ...]  # the enclosing classes, then the function's name
ORDER = ("passed", "skipped", "failed")  # merging a test's real rounds: the worst outcome wins
_OWN_SCOPE_STOPS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class TestSite:
    """Where a graded test's function is defined."""

    __test__ = False  # not a pytest test class

    file: str  # the test file, relative to the checkout
    scope: Scope


@dataclass(frozen=True)
class RoundPlan:
    """One round: each graded test function's role and the line appended to it."""

    roles: dict[TestSite, Role]
    lines: dict[TestSite, str]  # the `assert` appended to the function (without indentation)


def site_of(test_id: str) -> TestSite | None:
    """The definition site a node id names (`file::Class::test[param]`); None for an id without a function."""
    parts = test_id.split("[", 1)[0].split("::")
    if len(parts) < 2 or not all(parts):
        return None
    return TestSite(parts[0], tuple(parts[1:]))


def check_line(role: Role, rng: random.Random) -> str:
    """`assert A % M != R`: true for a real round, false for a canary (R = A % M)."""
    a, m = rng.randrange(10**6, 10**9), rng.randrange(11, 10**4)
    r = a % m if role == "canary" else (a % m + rng.randrange(1, m)) % m
    return f"assert {a} % {m} != {r}"


def plan_rounds(test_ids: Iterable[str], rounds: int, rng: random.Random) -> tuple[RoundPlan, ...]:
    """`rounds` plans; each test function is a canary in `rounds // 2` rounds drawn at random, real in the others."""
    if rounds < 2:
        raise ValueError(f"canary rounds need at least 2 rounds (a real one and a canary), got {rounds}")
    sites = sorted({site for test_id in test_ids if (site := site_of(test_id)) is not None},
                   key=lambda s: (s.file, s.scope))
    canary_rounds = {site: set(rng.sample(range(rounds), rounds // 2)) for site in sites}
    plans = []
    for index in range(rounds):
        roles: dict[TestSite, Role] = {s: "canary" if index in canary_rounds[s] else "real" for s in sites}
        plans.append(RoundPlan(roles=roles, lines={s: check_line(role, rng) for s, role in roles.items()}))
    return tuple(plans)


def _functions(body: Sequence[ast.stmt], scope: Scope) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The definitions of `scope` among `body`'s statements (classes by name, then the function)."""
    if len(scope) == 1:
        return [node for node in body if isinstance(node, _FUNCTIONS) and node.name == scope[0]]
    return [found for node in body if isinstance(node, ast.ClassDef) and node.name == scope[0]
            for found in _functions(node.body, scope[1:])]


def _returns_early(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the function's own code (not nested definitions) has a return or yield."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, _OWN_SCOPE_STOPS):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _edit(lines: list[str], function: ast.FunctionDef | ast.AsyncFunctionDef, check: str) -> tuple[int, int, str]:
    """(line index, byte column or -1 for a new line before that index, text) placing `check` in `function`."""
    body = function.body
    early = _returns_early(function)
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
        isinstance(body[0].value.value, str) and len(body) > 1
    anchor = (body[1] if docstring else body[0]) if early else body[-1]
    first = lines[body[0].lineno - 1].encode("utf-8")[:body[0].col_offset]
    if first.strip():  # the body starts on the `def` line: `; check` on the same line
        if early:
            return anchor.lineno - 1, anchor.col_offset, f"{check}; "
        return anchor.end_lineno - 1, anchor.end_col_offset, f"; {check}"
    indent = first.decode("utf-8")
    if early:
        start = min([anchor.lineno, *(d.lineno for d in getattr(anchor, "decorator_list", []))])
        return start - 1, -1, f"{indent}{check}"
    return anchor.end_lineno, -1, f"{indent}{check}"


def rewrite_source(text: str, checks: dict[Scope, str]) -> tuple[str, frozenset[Scope]]:
    """`text` with each scope's check placed in its function(s); (the new text, the scopes placed). A file that does
    not parse is returned unchanged with nothing placed."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text, frozenset()
    lines = text.splitlines(keepends=True)
    edits = [(_edit(lines, function, check), scope) for scope, check in checks.items()
             for function in _functions(tree.body, scope)]
    for (index, column, insert), _ in sorted(edits, key=lambda e: (e[0][0], e[0][1]), reverse=True):
        if column >= 0:
            raw = lines[index].encode("utf-8")
            lines[index] = (raw[:column] + insert.encode("utf-8") + raw[column:]).decode("utf-8")
            continue
        if index > 0 and not lines[index - 1].endswith(("\n", "\r")):
            lines[index - 1] += "\n"
        ending = "\r\n" if index > 0 and lines[index - 1].endswith("\r\n") else "\n"
        lines.insert(index, insert + ending)
    rewritten = "".join(lines)
    try:
        ast.parse(rewritten)
    except SyntaxError:
        return text, frozenset()
    return rewritten, frozenset(scope for _, scope in edits)


def unguarded(plan: RoundPlan, placed: Iterable[TestSite]) -> frozenset[TestSite]:
    """The plan's sites whose check could not be placed."""
    return frozenset(plan.roles) - frozenset(placed)


def role_of(plan: RoundPlan, test_id: str, unplaced: frozenset[TestSite]) -> Role:
    """A graded test's role in a round (real where no check was placed)."""
    site = site_of(test_id)
    return "real" if site is None or site in unplaced else plan.roles.get(site, "real")


def merge_real(seen: list[str | None]) -> str | None:
    """A test's outcome over its real rounds: absent everywhere stays absent, absent somewhere is failed, otherwise
    the worst (failed over skipped over passed)."""
    if all(outcome is None for outcome in seen):
        return None
    if any(outcome is None for outcome in seen):
        return "failed"
    return max(seen, key=lambda outcome: ORDER.index(outcome) if outcome in ORDER else len(ORDER))


def canary_problem(roles: list[dict[str, Role]], outcomes: list[dict[str, str]],
                   xfailed: Sequence[frozenset[str]] = ()) -> str | None:
    """Why the rounds cannot be believed: a canary (a graded test in a round where its appended line fails) reported
    passed, or skipped while its real rounds did not skip, unless its skip is an expected failure (`xfailed[i]`: an
    xfail-marked test's canary fails as its mark expects, whatever its real rounds did). `roles[i]`, `outcomes[i]`
    and `xfailed[i]` are round i's by node id."""
    for index, (round_roles, round_outcomes) in enumerate(zip(roles, outcomes, strict=True)):
        expected = xfailed[index] if index < len(xfailed) else frozenset()
        for test_id, role in sorted(round_roles.items()):
            seen = round_outcomes.get(test_id)
            if role != "canary" or seen in (None, "failed") or (seen == "skipped" and test_id in expected):
                continue
            real = {outcomes[i].get(test_id) for i, r in enumerate(roles) if r.get(test_id) == "real"}
            if seen == "skipped" and real == {"skipped"}:
                continue
            return (f"the canary of {test_id} in round {index + 1} of {len(roles)} (the same test with a failing line "
                    f"appended) was reported {seen}: something in the tested code rewrites test outcomes")
    return None


def real_outcomes(roles: list[dict[str, Role]], outcomes: list[dict[str, str]]) -> dict[str, str]:
    """The outcomes the grade uses: each graded test's merged over its real rounds; anything else (a module that
    did not import) as round 1 saw it."""
    merged = dict(outcomes[0])
    for test_id in roles[0]:
        seen = [outcomes[i].get(test_id) for i, r in enumerate(roles) if r[test_id] == "real"]
        if (outcome := merge_real(seen)) is None:
            merged.pop(test_id, None)
        else:
            merged[test_id] = outcome
    return merged
