"""What the grading Job runs in the instance image, and reading its log back into per-test outcomes.

The `swebench` package (5.x) no longer derives eval scripts from repository constants: it runs the `eval_script`
column of its newer datasets, which the normalised instance (`recipes.swe.instances`) does not keep. So the script
here is a minimal equivalent of SWE-bench's for its Python repositories: activate the image's `testbed` conda env,
apply the model patch the way SWE-bench's harness does (`git apply`, then `--reject`, then `patch --fuzz=5`), reset
the files the test patch touches to the base commit, apply the test patch, and run the test files it touches with
the repository's runner (pytest -rA; Django's runtests.py; SymPy's bin/test), between SWE-bench's log markers and
with the test command's exit status recorded after them. A test patch that does not apply is marked
`TEST_PATCH_FAIL` (distinct from SWE-bench's `APPLY_PATCH_FAIL` of the model patch: it is the instance's or the
grading's fault, not the model's). The log is read with `swebench`'s own pieces: its
per-repository parser (`MAP_REPO_TO_PARSER_PY`, pytest's elsewhere) through `get_logs_eval` (markers, apply
failures, exit-status cross-check), and its `test_passed` / `test_maintained` (SWE-bench's matching of truncated
parametrised ids) to fill the outcomes that `recipes.swe.grader.is_resolved` judges.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.runners.manifests import SANDBOX_WORKDIR
from recipes.swe.diffs import split_patch
from recipes.swe.grader import is_resolved
from recipes.swe.testrun import TestRun

GRADE_DIR = "/var/run/harnessrl-grade"  # where the grading Job mounts model.patch, test.patch and eval.sh
TEST_PATCH_FAIL = ">>>>> Test Patch Apply Failed"  # the script's marker for a test patch that does not apply
NON_TEST_SUFFIXES = (".json", ".png", ".csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")
PYTEST = "pytest --no-header -rA --tb=no -p no:cacheprovider"
DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"


@dataclass(frozen=True)
class LogVerdict:
    """What the grading log says."""

    resolved: bool  # SWE-bench's rule on the parsed outcomes
    parsed: bool  # the log had test output (False: a patch did not apply, or the tests never ran)
    model_patch_applied: bool  # False: the script's model-patch step printed SWE-bench's APPLY_PATCH_FAIL
    test_patch_applied: bool  # False: the test patch did not apply (TEST_PATCH_FAIL; not the model's fault)
    outcomes: dict[str, str]  # FAIL_TO_PASS / PASS_TO_PASS id -> passed | failed | skipped
    broken: dict[str, list[str]]  # fail_to_pass_failed / pass_to_pass_failed


def touched_files(test_patch: str) -> list[str]:
    """The files the test patch touches, in its order."""
    return list(split_patch(test_patch))


def runner_command(repo: str, files: list[str]) -> str:
    """The repository's test runner on the test files (non-test data files left out)."""
    tests = [f for f in files if not f.endswith(NON_TEST_SUFFIXES)]
    if repo == "django/django":
        modules = [f.removeprefix("tests/").removesuffix(".py").replace("/", ".") for f in tests]
        return f"{DJANGO} {shlex.join(modules)}"
    if repo == "sympy/sympy":
        return f"{SYMPY} {shlex.join(tests)}"
    return f"{PYTEST} {shlex.join(tests)}"


def eval_script(instance: Mapping[str, Any]) -> str:
    """The grading Job's bash script for a normalised instance (model patch and test patch read from GRADE_DIR)."""
    from swebench.harness.constants import (
        APPLY_PATCH_FAIL,
        APPLY_PATCH_PASS,
        END_TEST_OUTPUT,
        START_TEST_OUTPUT,
        TEST_EXIT_CODE,
    )

    base = shlex.quote(str(instance["base_commit"]))
    files = touched_files(str(instance["test_patch"]))
    reset = f"git checkout {base} -- {shlex.join(files)}"
    model, tests = f"{GRADE_DIR}/model.patch", f"{GRADE_DIR}/test.patch"
    return "\n".join([
        "#!/bin/bash", "set -uo pipefail",
        "source /opt/miniconda3/bin/activate && conda activate testbed || echo 'no testbed conda env; using PATH'",
        f"cd {SANDBOX_WORKDIR} && git config --global --add safe.directory {SANDBOX_WORKDIR}",
        f"if git apply --verbose {model} || git apply --verbose --reject {model} || "
        f"patch --batch --fuzz=5 -p1 -i {model}; then echo '{APPLY_PATCH_PASS}'; "
        f"else echo '{APPLY_PATCH_FAIL}'; exit 1; fi",
        reset,
        f"git apply --verbose {tests} || {{ echo '{TEST_PATCH_FAIL}'; exit 1; }}",
        f"echo '{START_TEST_OUTPUT}'",
        runner_command(str(instance["repo"]), files),
        "code=$?",
        f"echo '{END_TEST_OUTPUT}'",
        f"echo \"{TEST_EXIT_CODE}: $code\"",
        reset, "",
    ])


def parser_name(repo: str) -> str:
    """The name (in swebench's PARSER_REGISTRY) of the repository's log parser; pytest's for unknown ones."""
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

    parser = MAP_REPO_TO_PARSER_PY.get(repo)
    return next((name for name, function in PARSER_REGISTRY.items() if function is parser), "parse_log_pytest")


def read_log(instance: Mapping[str, Any], log: str) -> LogVerdict:
    """The grading log judged with SWE-bench's rule for the instance's FAIL_TO_PASS / PASS_TO_PASS."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, FAIL_ONLY_REPOS, START_TEST_OUTPUT, EvalType
    from swebench.harness.grading import get_logs_eval, test_maintained, test_passed
    from swebench.types import TestSpec

    f2p, p2p = list(instance["FAIL_TO_PASS"]), list(instance["PASS_TO_PASS"])
    repo = str(instance["repo"])
    eval_type = EvalType.FAIL_ONLY if repo in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
    spec = TestSpec(instance_id=str(instance["instance_id"]), image="", eval_script_list=[], repo=repo,
                    version=str(instance.get("version") or ""), FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p,
                    log_parser=parser_name(repo), eval_type=eval_type.value)
    with tempfile.TemporaryDirectory(prefix="harnessrl-grade-log-") as scratch:
        path = Path(scratch) / "test_output.txt"
        path.write_text(log, encoding="utf-8")
        status_map, parsed = get_logs_eval(spec, str(path))
    outcomes = {test: "passed" if test_passed(test, status_map) else
                "skipped" if test_maintained(test, status_map) else "failed" for test in dict.fromkeys(f2p + p2p)}
    resolved, broken = is_resolved(TestRun(outcomes=outcomes), f2p, p2p)
    setup = log.split(START_TEST_OUTPUT, 1)[0]  # the patch steps' output (the tests' own output cannot fake them)
    return LogVerdict(resolved and parsed, parsed, APPLY_PATCH_FAIL not in setup, TEST_PATCH_FAIL not in setup,
                      outcomes, broken)
