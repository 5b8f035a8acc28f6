"""benchmarks/swe_statement_sampling.py's pure parts: the bug site read back from a generated patch, the exact-command
check and the Wilson interval."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.swe_statement_sampling import (
    WORDINGS,
    buggy_text,
    exact_command,
    fixes,
    site_from_patch,
    user_turn,
    wilson,
)
from recipes.swe.generator import bug_patch
from recipes.swe.harness_configs import action_regex
from recipes.swe.ladder import bug_site, edit_command, ladder_statement
from recipes.swe.run_metrics import parsed_action

ORIGINAL = "def f(a, b):\n\n    if a == b:\n        return 1\n\n    return 2\n"
CASES = [  # (mutated source, kind)
    ("def f(a, b):\n\n    if a != b:\n        return 1\n\n    return 2\n", "op_flip"),  # after a blank line
    ("def f(a, b):\n\n    if a == b:\n        return 1\n\n    return 3\n", "off_by_one"),  # the last line
    ("def g(a, b):\n\n    if a == b:\n        return 1\n\n    return 2\n", "rename"),  # the first line
]


@pytest.mark.parametrize(("mutated", "kind"), CASES)
def test_the_site_read_from_a_generated_patch_is_the_generators_site(mutated, kind):
    expected = bug_site("pkg/mod.py", ORIGINAL, mutated, kind)
    assert expected is not None
    assert site_from_patch(bug_patch("pkg/mod.py", ORIGINAL, mutated)) == dataclasses.replace(expected, kind="")


def test_a_patch_of_two_lines_or_two_files_has_no_site():
    two_lines = ORIGINAL.replace("== b", "!= b").replace("return 2", "return 3")
    assert site_from_patch(bug_patch("m.py", ORIGINAL, two_lines)) is None
    mutated = CASES[0][0]
    assert site_from_patch(bug_patch("a.py", ORIGINAL, mutated) + bug_patch("b.py", ORIGINAL, mutated)) is None


def test_the_ladder_wording_is_the_generators_level_0_statement_and_the_others_carry_its_command():
    site = site_from_patch(bug_patch("pkg/mod.py", ORIGINAL, CASES[0][0]))
    assert WORDINGS["ladder"](site) == ladder_statement(0, "", "pkg/mod.py", site)
    for wording in ("previous-fenced", "command-first", "run-only"):
        assert f"```bash\n{edit_command(site)}\n```" in WORDINGS[wording](site)
    assert f"```\n{edit_command(site)}\n```" in WORDINGS["previous"](site)


def test_the_user_turn_is_what_the_harness_sends_the_statement_then_its_reply_format():
    statement = "Line 3 of `m.py` has a bug. {{ not jinja in a task }}"
    assert user_turn(statement, "bare") == statement
    assert user_turn(statement) == f"{statement}\n\nReply with only that command, in a ```bash code block."


def test_only_an_answer_whose_one_action_is_the_statements_command_counts_as_exact():
    site = site_from_patch(bug_patch("pkg/mod.py", ORIGINAL, CASES[0][0]))
    regex = action_regex("one_command")
    command = edit_command(site)

    def exact(answer: str) -> bool:
        return exact_command(parsed_action(answer, regex), site)

    assert exact(f"Here:\n```bash\n{command}\n```") and exact(f"```\n  {command}  \n```")
    assert not exact(f"```bash\n{command.replace('3s', '4s')}\n```")
    assert not exact(f"```bash\n{command}\n```\n```bash\nls\n```")  # two actions
    assert not exact(command)  # no fence: not an action


def test_an_action_fixes_the_bug_only_when_it_leaves_exactly_the_fixed_file():
    site = site_from_patch(bug_patch("pkg/mod.py", ORIGINAL, CASES[0][0]))
    assert buggy_text(ORIGINAL, site) == CASES[0][0]
    assert fixes(edit_command(site), site, ORIGINAL)
    assert fixes("sed -i '3s/!=/==/' pkg/mod.py", site, ORIGINAL)  # another command, the same file
    assert not fixes("sed -i '3s/!=/<=/' pkg/mod.py", site, ORIGINAL)
    assert not fixes(f"{edit_command(site)} && echo '# done' >> pkg/mod.py", site, ORIGINAL)  # more than the fix
    assert not fixes("rm pkg/mod.py", site, ORIGINAL) and not fixes("ls", site, ORIGINAL)
    with pytest.raises(ValueError, match="the store changed"):
        buggy_text(ORIGINAL.replace("a == b", "a is b"), site)


def test_wilson_interval():
    low, high = wilson(6, 100)  # p = 0.06: the interval is asymmetric, inside [0, 1]
    assert (round(low, 4), round(high, 4)) == (0.0278, 0.1248)  # by hand: centre 0.07628, half 0.04849
    assert wilson(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson(10, 10)[1] == pytest.approx(1.0)
