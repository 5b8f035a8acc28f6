"""The difficulty ladder of generated SWE tasks: how much the problem statement reveals, by level.

One generated bug can be stated at any level; the grader is the same at every level (fresh checkout, FAIL_TO_PASS /
PASS_TO_PASS), only the statement changes:

  level 0: the line, the file and one shell command that makes the change (a `sed` substitution of the changed words
           only), in two sentences a 135M model copies from (benchmarks/make_train.md: with this statement and the
           one_command prompt of 2026-12-05, 33% of SmolLM2-135M's answers fix the bug at T 0.35; before, 1%);
  level 1: the file, the line (its current text) and the kind of bug;
  level 2: the file, and the failing behaviour (today's statement with the file named);
  level 3: the failing behaviour only (the failing tests and their messages): the generator's original statement.

Levels 0 and 1 say nothing about the tests (no test names, no failure messages); no level quotes the bug patch, and
only level 0 gives the fix. Levels 0 and 1 need a bug that changes exactly one line (`BugSite`). The generator's
`LadderMix` (pydantic: it comes from a profile) says which share of the tasks each level gets.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

LEVELS = (0, 1, 2, 3)
TODAY = 3  # the level of the original statement (and of instances stored before the ladder)
SINGLE_LINE_LEVELS = (0, 1)  # levels that point at one line
KIND_DESCRIPTIONS = {  # what each bugs.py mutator did, in words an issue would use (the fix is not named)
    "op_flip": "an operator was replaced by a wrong one",
    "bool_flip": "`and` and `or` were swapped",
    "off_by_one": "a comparison or a small constant is off by one",
    "negate_condition": "a condition is negated",
    "swap_returns": "two return values were swapped",
}


class LadderMix(BaseModel):
    """Which share of the generated tasks is stated at each level (weights, normalised; a level left out gets none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: dict[int, float] = Field(default_factory=lambda: {TODAY: 1.0},
                                     description="level (0: the exact change given ... 3: failing behaviour only) "
                                                 "-> weight")

    @field_validator("levels")
    @classmethod
    def _check_levels(cls, levels: dict[int, float]) -> dict[int, float]:
        unknown = sorted(set(levels) - set(LEVELS))
        if unknown:
            raise ValueError(f"unknown ladder level(s) {unknown}; the levels are {list(LEVELS)}")
        if any(weight < 0 for weight in levels.values()) or sum(levels.values()) <= 0:
            raise ValueError(f"ladder weights {levels} must be >= 0 with a positive sum, e.g. {{0: 0.5, 1: 0.5}}")
        return levels


def level_counts(mix: LadderMix, count: int) -> dict[int, int]:
    """How many of `count` tasks each level gets: proportional to its weight, largest remainders rounded up."""
    total = sum(mix.levels.values())
    exact = {level: count * weight / total for level, weight in sorted(mix.levels.items())}
    counts = {level: int(share) for level, share in exact.items()}
    by_remainder = sorted(exact, key=lambda level: (-(exact[level] - counts[level]), level))
    for level in by_remainder[:count - sum(counts.values())]:
        counts[level] += 1
    return counts


def level_sequence(mix: LadderMix, count: int, seed: int) -> list[int]:
    """The level of each of `count` tasks in generation order: `level_counts`, shuffled with `seed`."""
    levels = [level for level, n in level_counts(mix, count).items() for _ in range(n)]
    random.Random(f"ladder:{seed}").shuffle(levels)
    return levels


@dataclass(frozen=True)
class BugSite:
    """Where a one-line bug is and what the line must become (the fix, known to the generator only)."""

    file: str  # the source file, relative to the repository root
    line: int  # the changed line, from 1
    buggy_line: str  # the line as the task's repository holds it (no newline)
    fixed_line: str  # the line as it was before the bug (no newline)
    kind: str  # the mutator's name (a KIND_DESCRIPTIONS key)


def bug_site(file: str, original: str, mutated: str, kind: str) -> BugSite | None:
    """The site of a bug that changes exactly one line of `file` (None when it changes more or fewer lines)."""
    before, after = original.splitlines(), mutated.splitlines()
    if len(before) != len(after):
        return None
    changed = [index for index, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]
    if len(changed) != 1:
        return None
    index = changed[0]
    return BugSite(file=file, line=index + 1, buggy_line=after[index], fixed_line=before[index], kind=kind)


def edit_command(site: BugSite) -> str:
    """One `sed -i` command that makes the site's line the fixed line (quoted for a POSIX shell): a substitution of
    the changed words only (`12s|==|!=|`: a few tokens for a small model to copy), else of the whole line."""
    return span_edit_command(site) or line_edit_command(site)


def line_edit_command(site: BugSite) -> str:
    """`sed -i 'Ls|.*|<fixed line>|' file`: the whole line replaced."""
    replacement = site.fixed_line.replace("\\", "\\\\").replace("|", "\\|").replace("&", "\\&")
    return f"sed -i {shlex.quote(f'{site.line}s|.*|{replacement}|')} {shlex.quote(site.file)}"


def changed_words(buggy: str, fixed: str) -> tuple[int, str, str]:
    """Where the two lines differ, widened to whole whitespace-separated words: (start, buggy part, fixed part)."""
    start = 0
    while start < min(len(buggy), len(fixed)) and buggy[start] == fixed[start]:
        start += 1
    tail = 0
    while tail < min(len(buggy), len(fixed)) - start and buggy[-1 - tail] == fixed[-1 - tail]:
        tail += 1
    while start > 0 and not buggy[start - 1].isspace():
        start -= 1
    while tail > 0 and not buggy[len(buggy) - tail].isspace():
        tail -= 1
    return start, buggy[start:len(buggy) - tail], fixed[start:len(fixed) - tail]


def span_edit_command(site: BugSite) -> str | None:
    """`sed -i 'Ls|old|new|N' file` replacing the changed words (the Nth occurrence on the line); None when no
    delimiter is free or the words cannot be matched literally there."""
    start, old, new = changed_words(site.buggy_line, site.fixed_line)
    delimiter = next((d for d in "|#/,@%" if d not in old + new), None)
    if not old or delimiter is None:
        return None
    occurrences, at = [], site.buggy_line.find(old)
    while at >= 0:  # sed's matches: leftmost, non-overlapping
        occurrences.append(at)
        at = site.buggy_line.find(old, at + len(old))
    if start not in occurrences:
        return None
    pattern = "".join(f"\\{c}" if c in "\\.*[^$" else c for c in old)
    replacement = new.replace("\\", "\\\\").replace("&", "\\&")
    nth = occurrences.index(start) + 1
    script = f"{site.line}s{delimiter}{pattern}{delimiter}{replacement}{delimiter}{nth if nth > 1 else ''}"
    return f"sed -i {shlex.quote(script)} {shlex.quote(site.file)}"


def ladder_statement(level: int, failing_behaviour: str, file: str, site: BugSite | None) -> str:
    """The problem statement at `level`: `failing_behaviour` is the original (level-3) statement, `file` the mutated
    file, `site` the one-line bug (required for levels 0 and 1)."""
    if level not in LEVELS:
        raise ValueError(f"level {level} is not a ladder level; use one of {list(LEVELS)}")
    if level == TODAY:
        return failing_behaviour
    if level == 2:
        return f"The bug is in `{file}`.\n\n{failing_behaviour}"
    if site is None:
        raise ValueError(f"level {level} names one line: it needs a bug that changes exactly one line of {file}")
    if level == 0:
        return (f"Line {site.line} of `{site.file}` has a bug. This command fixes it:\n\n"
                f"```bash\n{edit_command(site)}\n```")
    return (f"The file `{site.file}` has a bug on line {site.line}, which reads:\n\n```\n{site.buggy_line}\n```\n\n"
            f"The bug: {KIND_DESCRIPTIONS.get(site.kind, site.kind)}. Fix that line (keep its indentation), then "
            "submit.")


def instance_level(instance: dict) -> int:
    """An instance's ladder level (instances stored before the ladder: the original statement, TODAY)."""
    level = instance.get("level")
    return TODAY if level is None else int(level)
