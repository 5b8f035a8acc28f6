"""The ast mutators: each kind on a known snippet (table), and properties over every candidate of real source."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipes.swe.bugs import apply_mutation, candidate_mutations

SOURCE = '''\
def f(a, b, items):  # a comment that must survive
    """Doc."""
    if a < b and b:
        return a + b
    while not items:
        items = [1]
    return items[0] if a == b else -a
'''


@pytest.mark.parametrize(("kind", "before", "after"), [
    ("op_flip", "return a + b", "return a - b"),
    ("op_flip", "a == b", "a != b"),
    ("bool_flip", "if a < b and b:", "if a < b or b:"),
    ("off_by_one", "if a < b and b:", "if a <= b and b:"),
    ("off_by_one", "return items[0]", "return items[1]"),
    ("negate_condition", "while not items:", "while items:"),
    ("negate_condition", "if a < b and b:", "if not (a < b and b):"),
    ("swap_returns", "return a + b", "return items[0] if a == b else -a"),
])
def test_each_mutator_produces_the_expected_bug(kind, before, after):
    [index] = [i for i, line in enumerate(SOURCE.splitlines()) if before in line]
    expected = SOURCE.splitlines()[index].replace(before, after)
    mutated = [apply_mutation(SOURCE, m).splitlines() for m in candidate_mutations(SOURCE) if m.kind == kind]
    assert any(lines[index] == expected for lines in mutated), [lines[index] for lines in mutated]


def test_module_level_code_is_never_mutated():
    assert candidate_mutations("X = 1 + 2\nif X == 3:\n    Y = not X\n") == []


SNIPPETS = [SOURCE, "def g(x):\n    return x % 2 == 0 or x in (1, 2)\n",
            "def h(é, s):\n    return s[0:é - 1] if é > 1 else s  # ünicode\n",
            "class C:\n    def m(self, v):\n        if v is None:\n            return 0\n        return v // 2\n"]


@settings(max_examples=60, deadline=None)
@given(snippet=st.sampled_from(SNIPPETS), pick=st.integers(min_value=0, max_value=1000))
def test_every_mutation_parses_changes_the_ast_and_keeps_other_lines(snippet, pick):
    mutations = candidate_mutations(snippet)
    mutation = mutations[pick % len(mutations)]
    mutated = apply_mutation(snippet, mutation)
    assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(snippet))
    touched = {line for edit in mutation.edits for line in range(edit.start[0], edit.end[0] + 1)}
    for number, (old, new) in enumerate(zip(snippet.splitlines(), mutated.splitlines(), strict=False), start=1):
        if number not in touched and len(snippet.splitlines()) == len(mutated.splitlines()):
            assert old == new
