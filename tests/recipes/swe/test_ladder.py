"""The difficulty ladder: what each level's statement reveals (and never: the tests, the patch), the mix, the sites."""

from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

from recipes.swe import generator
from recipes.swe.generator import generate_or_reuse, generation_key, load_instances
from recipes.swe.ladder import (
    LadderMix,
    bug_site,
    edit_command,
    instance_level,
    ladder_statement,
    level_counts,
    level_sequence,
    line_edit_command,
)
from recipes.swe.recipe import SweRecipe

ORIGINAL = "def f(x):\n    if x < 0:\n        return 0\n    return x\n"
MUTATED = "def f(x):\n    if x <= 0:\n        return 0\n    return x\n"
SITE = bug_site("pkg/mod.py", ORIGINAL, MUTATED, "off_by_one")
BEHAVIOUR = ("Something is broken in pkg: 1 test(s) that used to pass now fail.\n\n"
             "- `tests/test_mod.py::test_zero`: assert 0 == -0\n\nFind the cause in the library's source and fix it.")
TEST_TEXT = ("tests/test_mod.py", "test_zero", "assert 0 == -0")


@pytest.mark.parametrize("level, reveals, hides", [
    (0, ["`pkg/mod.py`", "Line 2", "```bash\nsed -i '2s|<=|<|' pkg/mod.py\n```"],
     [*TEST_TEXT, "Something is broken", "if x <= 0", "if x < 0"]),
    (1, ["`pkg/mod.py`", "line 2", "    if x <= 0:", "off by one"], [*TEST_TEXT, "if x < 0", "sed -i"]),
    (2, ["`pkg/mod.py`", *TEST_TEXT], ["line 2", "if x < 0", "if x <= 0", "sed -i"]),
    (3, [*TEST_TEXT], ["pkg/mod.py", "line 2", "if x < 0", "if x <= 0", "sed -i"]),
])
def test_each_level_reveals_its_share_and_nothing_more(level, reveals, hides):
    statement = ladder_statement(level, BEHAVIOUR, "pkg/mod.py", SITE)
    for text in reveals:
        assert text in statement, (level, text)
    for text in hides:
        assert text not in statement, (level, text)


def test_one_line_levels_need_a_one_line_bug_and_unknown_levels_are_refused():
    with pytest.raises(ValueError, match="exactly one line"):
        ladder_statement(1, BEHAVIOUR, "pkg/mod.py", None)
    assert ladder_statement(2, BEHAVIOUR, "pkg/mod.py", None).endswith(BEHAVIOUR)
    with pytest.raises(ValueError, match="not a ladder level"):
        ladder_statement(4, BEHAVIOUR, "pkg/mod.py", SITE)


def test_bug_site_is_the_one_changed_line_only():
    assert SITE is not None and (SITE.line, SITE.buggy_line, SITE.fixed_line) == (2, "    if x <= 0:", "    if x < 0:")
    two_lines = MUTATED.replace("return x", "return -x")
    assert bug_site("m.py", ORIGINAL, two_lines, "op_flip") is None
    assert bug_site("m.py", ORIGINAL, ORIGINAL, "op_flip") is None
    assert bug_site("m.py", ORIGINAL, ORIGINAL + "x = 1\n", "op_flip") is None


@pytest.mark.parametrize("fixed", ["    return a | b & c", "    s = 'it''s' + \"q\"", r"    p = '\\n' + x"])
def test_the_level_0_command_restores_the_line_exactly_in_a_shell(tmp_path, fixed):
    original = f"def g(a, b, c, x):\n{fixed}\n    return 1\n"
    mutated = original.replace(fixed, "    return None")
    site = bug_site("m.py", original, mutated, "op_flip")
    (tmp_path / "m.py").write_text(mutated)
    subprocess.run(["sh", "-c", edit_command(site)], cwd=tmp_path, check=True)
    assert (tmp_path / "m.py").read_text() == original


@pytest.mark.parametrize("buggy, fixed, command", [
    ("    if k == c and d:", "    if k != c and d:", "sed -i '2s|==|!=|' m.py"),
    ("    y = a == b == c", "    y = a == b != c", "sed -i '2s|==|!=|2' m.py"),  # the second match on the line
    ("    if x:", "    if not x:", "sed -i '2s|x:|not x:|' m.py"),
    ("    return b, a", "    return a, b", "sed -i '2s|b, a|a, b|' m.py"),
    ("    return a.b*c[0]$", "    return a.b|c[0]$&\\", None),  # regex and replacement specials, `|` in the fix
    ("    return x", "return x", None),  # only whitespace changed: the whole line
])
def test_the_level_0_command_changes_only_the_changed_words(tmp_path, buggy, fixed, command):
    original, mutated = f"def g():\n{fixed}\n    pass\n", f"def g():\n{buggy}\n    pass\n"
    site = bug_site("m.py", original, mutated, "op_flip")
    assert command is None or edit_command(site) == command
    assert len(edit_command(site)) < len(line_edit_command(site)) or command is None
    (tmp_path / "m.py").write_text(mutated)
    subprocess.run(["sh", "-c", edit_command(site)], cwd=tmp_path, check=True)
    assert (tmp_path / "m.py").read_text() == original


def test_mix_counts_are_proportional_and_sum_to_the_count():
    assert level_counts(LadderMix(), 5) == {3: 5}
    assert level_counts(LadderMix(levels={0: 1, 1: 1}), 5) == {0: 3, 1: 2}
    assert level_counts(LadderMix(levels={0: 0.6, 1: 0.3, 3: 0.1}), 10) == {0: 6, 1: 3, 3: 1}
    assert level_counts(LadderMix(levels={0: 0, 2: 1}), 3) == {0: 0, 2: 3}
    sequence = level_sequence(LadderMix(levels={0: 1, 1: 1, 2: 1}), 9, seed=1)
    assert sorted(sequence) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert sequence == level_sequence(LadderMix(levels={0: 1, 1: 1, 2: 1}), 9, seed=1)


@pytest.mark.parametrize("levels, match", [({5: 1.0}, "unknown ladder level"), ({0: -1.0, 1: 2.0}, ">= 0"),
                                           ({0: 0.0}, "positive sum")])
def test_a_bad_mix_is_refused_naming_the_levels(levels, match):
    with pytest.raises(ValidationError, match=match):
        LadderMix(levels=levels)
    with pytest.raises(ValidationError, match="extra"):
        LadderMix.model_validate({"levels": {0: 1}, "weights": 1})


def test_instances_without_a_level_are_the_original_statement():
    assert instance_level({}) == 3 and instance_level({"level": None}) == 3 and instance_level({"level": 0}) == 0


def test_the_generator_states_each_bug_at_its_level_and_the_recipe_carries_it(tiny_project, tmp_path):
    store = tmp_path / "store"
    tasks = SweRecipe(store=store, source=str(tiny_project)).generate(3, seed=0, levels={0: 1, 1: 1, 2: 1})
    instances = load_instances(store)
    assert sorted(i["level"] for i in instances) == [0, 1, 2]
    for instance in instances:
        assert instance["instance_id"].endswith(f"__l{instance['level']}")
        assert "tinymath.py" in instance["problem_statement"]
        mentions_tests = "test_tinymath" in instance["problem_statement"]
        assert mentions_tests == (instance["level"] == 2)
    assert [(t["id"], t["level"]) for t in tasks] == [(i["instance_id"], i["level"]) for i in instances]


def test_a_second_generation_with_the_same_inputs_is_reused_from_the_store(tiny_project, tmp_path, monkeypatch):
    store, mix = tmp_path / "store", LadderMix(levels={0: 1})
    first = generate_or_reuse(str(tiny_project), store, 1, 0, mix)
    monkeypatch.setattr(generator, "run_tests", lambda *a, **k: pytest.fail("searched for bugs again"))
    assert generate_or_reuse(str(tiny_project), store, 1, 0, mix) == first
    assert generation_key(str(tiny_project), 1, 0, mix) != generation_key(str(tiny_project), 1, 1, mix)
    assert generation_key(str(tiny_project), 1, 0, mix) != generation_key(str(tiny_project), 1, 0, LadderMix())
