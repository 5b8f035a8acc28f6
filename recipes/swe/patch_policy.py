"""What of an agent's diff a task lets the grader apply: by default edits to existing non-test source files only.

Pure: `review_patch(patch, base_files, policy)` → `PatchReview` (the diff that is graded, the files dropped, the
violations). A violation means the attempt tried to change what decides its own grade (tests, test folders,
`conftest.py`, test-runner configuration, interpreter start-up hooks, modules that shadow the runner or its plugins),
or sent a change the grader will not apply blind (a deleted, renamed, mode-changed, binary or symlink file, or a diff
that does not parse strictly), or added Python code that reaches for what could rewrite a verdict in-process
(`FORBIDDEN_CODE`): the grade is 0 and flagged `tamper`. New files that are none of those (the reproduction
script mini-swe-agent's prompt asks for) are dropped, not applied, unless the policy says they are tampering too.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from recipes.swe.patch_parse import FileChange, parse_patch

TEST_DIRS = frozenset({"tests", "test", "testing"})  # every file under a folder of one of these names is protected
TEST_FILES = ("test_*.py", "*_test.py", "conftest.py")
# Files that configure pytest (any section of them: telling sections apart would be a parser the agent can fool).
RUNNER_CONFIG = frozenset({"pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize"})  # module stems the interpreter imports at start-up
# Module names the runner imports (a path component with one of these stems would shadow it on sys.path).
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "pytest_outcomes", "harnessrl_pytest",
                            "xdist", "pytest_cov", "coverage", "exceptiongroup", "tomli"})
SOURCE_SUFFIXES = frozenset({".py", ".pyi", ".pyx", ".pxd", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs"})
# Code an added line of a Python file may not contain: the test runner's internals, exit hooks, the interpreter's
# import and tracing machinery, dynamic code, file-descriptor juggling (the outcomes pipe). Code under test shares
# pytest's process, so it could rewrite a verdict in-process; screening the diff raises the bar (obfuscation can still
# evade it: the runner's canary rounds, sentinel and exit-status check are the next layer). Rare in an honest library
# fix; a task whose project is itself about these overrides it.
FORBIDDEN_CODE = (r"_?pytest", r"\bpluggy\b", r"\batexit\b", r"\bos\._exit\b", r"\bsys\.modules\b",
                  r"\bsys\._getframe\b", r"\bgc\.get_(objects|referrers|referents)\b", r"\bctypes\b", r"/proc/",
                  r"\bsys\.(settrace|setprofile)\b", r"__builtins__", r"\bbuiltins\b", r"\bimportlib\b", r"__import__",
                  r"\bsys\.(meta_path|path_hooks)\b", r"(?i)harnessrl", r"\b(exec|eval)\s*\(",
                  r"\bos\.(dup2?|closerange)\b", r"/dev/fd")
NewFiles = Literal["drop", "tamper"]


@dataclass(frozen=True)
class PatchPolicy:
    """What a task allows the agent's diff to change."""

    new_files: NewFiles = "drop"  # unprotected new files: dropped (not applied) or tampering
    source_suffixes: frozenset[str] = SOURCE_SUFFIXES  # existing files of these suffixes may be edited
    extra_protected: tuple[str, ...] = ()  # more glob patterns (on the path or the file name) never to be changed
    forbidden_code: tuple[str, ...] = FORBIDDEN_CODE  # regexes an added line of a .py/.pyi file may not match


DEFAULT_POLICY = PatchPolicy()


@dataclass(frozen=True)
class Violation:
    """One change the policy refuses, and why."""

    path: str  # the file (or "<patch>" for the diff as a whole)
    reason: str  # why the change is refused


@dataclass(frozen=True)
class PatchReview:
    """The agent's diff judged by a policy."""

    graded: str  # the sections that are applied before the tests run
    graded_files: tuple[str, ...]  # their paths
    dropped: tuple[str, ...]  # unprotected new files, not applied
    violations: tuple[Violation, ...]  # refused changes (any makes the attempt `tamper`)

    @property
    def tampered(self) -> bool:
        """Whether the attempt changed something it must not."""
        return bool(self.violations)


def path_problem(path: str) -> str | None:
    """Why a diff path cannot be trusted as a relative path inside the tree (None when it can)."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or "\\" in path or any(ord(c) < 32 for c in path):
        return "not a plain relative path"
    if any(part in ("..", ".") for part in path.split("/")):
        return "a `.` or `..` component"
    if any(part.startswith(".git") and part != ".gitignore" for part in pure.parts):
        return "version-control data"
    return None


def protected_reason(path: str, policy: PatchPolicy = DEFAULT_POLICY) -> str | None:
    """Why the grade depends on `path` (so the agent may not change it), or None."""
    pure = PurePosixPath(path)
    if TEST_DIRS & {part.lower() for part in pure.parts[:-1]}:
        return "under a test folder (tests, their helpers, __init__.py and data files)"
    if any(fnmatch.fnmatch(pure.name, pattern) for pattern in TEST_FILES):
        return "a test file or conftest.py"
    if pure.name in RUNNER_CONFIG:
        return "test-runner configuration"
    if pure.suffix == ".pth" or _stem(pure.name) in STARTUP_HOOKS:
        return "an interpreter start-up hook (sitecustomize, usercustomize, .pth)"
    if any(_stem(part) in RUNNER_MODULES for part in pure.parts):
        return "shadows the test runner or one of its plugins"
    if any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(pure.name, p) for p in policy.extra_protected):
        return "protected by the task"
    return None


def _stem(name: str) -> str:
    return name.split(".", 1)[0]


def change_violation(change: FileChange, base_files: frozenset[str], policy: PatchPolicy) -> str | None:
    """Why `change` is refused (None when it is allowed or merely dropped)."""
    if (problem := path_problem(change.path)) is not None:
        return problem
    if (reason := protected_reason(change.path, policy)) is not None:
        return reason
    kinds = [("a symlink or submodule", change.special_mode), ("a binary diff", change.binary),
             ("a rename or copy", change.renamed), ("a mode change", change.mode_change),
             ("a deleted file", change.deleted)]
    if (kind := next((name for name, present in kinds if present), None)) is not None:
        return kind
    if change.new_file:
        return "a new file" if policy.new_files == "tamper" else None
    if change.path not in base_files:
        return "not a file of the task's base"
    if PurePosixPath(change.path).suffix not in policy.source_suffixes:
        return f"not a source file ({', '.join(sorted(policy.source_suffixes))})"
    if change.hunks == 0:
        return "a section without hunks"
    return forbidden_code(change, policy)


def forbidden_code(change: FileChange, policy: PatchPolicy) -> str | None:
    """Why an added line of a Python file is refused (the first forbidden pattern it matches where no removed line of
    the same file has the same text: an existing use that the fix rewrites is no new reach), or None."""
    if PurePosixPath(change.path).suffix not in (".py", ".pyi"):
        return None
    lines = change.text.splitlines()
    added = [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:] for line in lines if line.startswith("-") and not line.startswith("---")]
    for pattern in policy.forbidden_code:
        for line in added:
            for match in re.finditer(pattern, line):
                if not any(match.group(0) in old for old in removed):
                    return (f"added code uses `{match.group(0).strip()}` (test-runner internals, exit hooks, import "
                            f"or tracing machinery, dynamic code: what could rewrite a verdict in-process)")
    return None


def review_patch(patch: str, base_files: frozenset[str], policy: PatchPolicy = DEFAULT_POLICY) -> PatchReview:
    """Judge `patch` against the base's regular files `base_files` (relative POSIX paths)."""
    parsed = parse_patch(patch)
    violations = [Violation(path, reason) for path, reason in parsed.problems]
    graded, dropped = [], []
    for change in parsed.changes:
        reason = change_violation(change, base_files, policy)
        if reason is not None:
            violations.append(Violation(change.path, reason))
        elif change.new_file:
            dropped.append(change.path)
        else:
            graded.append(change)
    return PatchReview(graded="".join(c.text for c in graded), graded_files=tuple(c.path for c in graded),
                       dropped=tuple(dropped), violations=tuple(violations))
