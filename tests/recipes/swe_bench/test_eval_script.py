"""The grading script (valid bash, SWE-bench's markers and patch order, each repository's runner) and reading
recorded SWE-bench-style logs back into outcomes with swebench's parsers and SWE-bench's resolved rule."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from recipes.swe_bench import eval_script as script_module
from recipes.swe_bench.eval_script import eval_script, parser_name, read_log, runner_command, touched_files

TEST_PATCH = """\
diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py
--- a/astropy/modeling/tests/test_separable.py
+++ b/astropy/modeling/tests/test_separable.py
@@ -1,1 +1,2 @@
 x = 1
+y = 2
diff --git a/astropy/modeling/tests/data/expected.json b/astropy/modeling/tests/data/expected.json
--- a/astropy/modeling/tests/data/expected.json
+++ b/astropy/modeling/tests/data/expected.json
@@ -1,1 +1,1 @@
-{}
+{"a": 1}
"""
SEP = "astropy/modeling/tests/test_separable.py"


def instance(repo: str = "astropy/astropy", f2p=None, p2p=None) -> dict:
    return {"instance_id": "astropy__astropy-12907", "repo": repo, "version": "4.3",
            "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607", "test_patch": TEST_PATCH,
            "FAIL_TO_PASS": f2p if f2p is not None else [f"{SEP}::test_separable[compound_model6-result6]"],
            "PASS_TO_PASS": p2p if p2p is not None else [f"{SEP}::test_coord_matrix", f"{SEP}::test_cdot",
                                                         f"{SEP}::test_ogip_grammar_fail[log(photon"]}


def pytest_log(separable: str = "PASSED", cdot: str = "PASSED", exit_code: int = 0) -> str:
    """A grading log as the script writes it, pytest -rA's summary inside SWE-bench's markers."""
    message = " - AssertionError: assert False" if separable == "FAILED" else ""
    return f"""\
+ git apply --verbose /var/run/harnessrl-grade/model.patch
Applied patch astropy/modeling/separable.py cleanly.
>>>>> Applied Patch
>>>>> Start Test Output
============================= test session starts ==============================
collected 5 items

{SEP} ....                                                  [100%]

=========================== short test summary info ============================
PASSED {SEP}::test_coord_matrix
{cdot} {SEP}::test_cdot
PASSED {SEP}::test_ogip_grammar_fail[log(photon/s)]
SKIPPED [1] {SEP}:40: needs scipy
{separable} {SEP}::test_separable[compound_model6-result6]{message}
============================== 4 passed in 0.52s ===============================
>>>>> End Test Output
>>>>> Test Exit Code: {exit_code}
"""


DJANGO_LOG = """\
>>>>> Applied Patch
>>>>> Start Test Output
Testing against Django installed in '/testbed/django'
test_choices (admin_views.tests.AdminViewBasicTest) ... ok
test_filter (admin_views.tests.AdminViewBasicTest) ... FAIL
test_gis (admin_views.tests.AdminViewBasicTest) ... skipped 'needs GDAL'
======================================================================
FAIL: test_filter (admin_views.tests.AdminViewBasicTest)
>>>>> End Test Output
>>>>> Test Exit Code: 1
"""


def test_the_script_is_valid_bash_in_swe_benchs_order():
    script = eval_script(instance())
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    order = ["conda activate testbed", "git apply --verbose /var/run/harnessrl-grade/model.patch",
             "git checkout d16bfe05a744909de4b27f5875fe0d4ed41ce607 -- ",
             "git apply --verbose /var/run/harnessrl-grade/test.patch", ">>>>> Start Test Output",
             "pytest --no-header -rA", ">>>>> End Test Output", ">>>>> Test Exit Code: $code"]
    positions = [script.index(step) for step in order]
    assert positions == sorted(positions)
    assert "patch --batch --fuzz=5 -p1 -i /var/run/harnessrl-grade/model.patch" in script
    assert script.rstrip().endswith(f"-- {SEP} astropy/modeling/tests/data/expected.json")  # tests reset after


def test_each_repository_gets_its_runner_on_the_test_files_only():
    files = touched_files(TEST_PATCH)
    assert files == [SEP, "astropy/modeling/tests/data/expected.json"]
    assert runner_command("astropy/astropy", files).endswith(f"-p no:cacheprovider {SEP}")
    assert runner_command("django/django", ["tests/admin_views/tests.py", "tests/admin_views/models.py"]) == (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 admin_views.tests admin_views.models")
    assert runner_command("sympy/sympy", ["sympy/core/tests/test_basic.py"]).endswith(
        "bin/test -C --verbose sympy/core/tests/test_basic.py")


def test_parsers_come_from_swebench_per_repository():
    assert parser_name("django/django") == "parse_log_django"
    assert parser_name("sympy/sympy") == "parse_log_sympy"
    assert parser_name("astropy/astropy") in ("parse_log_astropy", "parse_log_pytest_v2", "parse_log_scikit",
                                              "parse_log_sphinx")
    assert parser_name("someone/unknown") == "parse_log_pytest"


def test_a_passing_log_resolves_and_truncated_parametrised_ids_match():
    verdict = read_log(instance(), pytest_log())
    assert verdict.parsed and verdict.resolved
    assert verdict.outcomes[f"{SEP}::test_ogip_grammar_fail[log(photon"] == "passed"


@pytest.mark.parametrize(("log", "broken"), [
    (pytest_log(separable="FAILED", exit_code=1),
     {"fail_to_pass_failed": [f"{SEP}::test_separable[compound_model6-result6]"], "pass_to_pass_failed": []}),
    (pytest_log(cdot="FAILED", exit_code=1),
     {"fail_to_pass_failed": [], "pass_to_pass_failed": [f"{SEP}::test_cdot"]}),
    (pytest_log(separable="SKIPPED"),
     {"fail_to_pass_failed": [f"{SEP}::test_separable[compound_model6-result6]"], "pass_to_pass_failed": []}),
])
def test_a_failing_or_skipped_fail_to_pass_or_a_broken_pass_to_pass_is_unresolved(log, broken):
    verdict = read_log(instance(), log)
    assert verdict.parsed and not verdict.resolved and verdict.broken == broken


def test_a_skipped_pass_to_pass_test_still_resolves():
    assert read_log(instance(), pytest_log(cdot="SKIPPED")).resolved


@pytest.mark.parametrize("log", [
    ">>>>> Patch Apply Failed\nerror: corrupt patch at line 12\n",
    ">>>>> Applied Patch\nconda: command not found\n",  # the tests never ran: no markers
    pytest_log(exit_code=2),  # the log claims success, the test command failed: not trusted
])
def test_logs_without_trustworthy_results_are_unresolved_and_unparsed(log):
    verdict = read_log(instance(), log)
    assert not verdict.parsed and not verdict.resolved


def test_a_django_log_is_read_with_djangos_parser():
    f2p = ["test_filter (admin_views.tests.AdminViewBasicTest)"]
    p2p = ["test_choices (admin_views.tests.AdminViewBasicTest)", "test_gis (admin_views.tests.AdminViewBasicTest)"]
    verdict = read_log(instance("django/django", f2p, p2p), DJANGO_LOG)
    assert verdict.parsed and not verdict.resolved
    assert verdict.outcomes == {f2p[0]: "failed", p2p[0]: "passed", p2p[1]: "skipped"}
    fixed = DJANGO_LOG.replace("... FAIL", "... ok").replace("Exit Code: 1", "Exit Code: 0")
    assert read_log(instance("django/django", f2p, p2p), fixed).resolved


MODULE = "pkg/mod.py"
TESTS = "tests/test_mod.py"
MODEL_PATCH = f"""\
diff --git a/{MODULE} b/{MODULE}
--- a/{MODULE}
+++ b/{MODULE}
@@ -1 +1 @@
-x = 1
+x = 2
"""


def _test_patch(context: str) -> str:
    return f"""\
diff --git a/{TESTS} b/{TESTS}
--- a/{TESTS}
+++ b/{TESTS}
@@ -1 +1,2 @@
 {context}
+y = 3
"""


def _run_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_patch: str, test_patch: str) -> str:
    """The grading script run on a one-commit repository (the tests never start: a patch fails); its log."""
    repo, grade = tmp_path / "testbed", tmp_path / "grade"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / MODULE).write_text("x = 1\n")
    (repo / TESTS).write_text("x = 1\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    grade.mkdir()
    (grade / "model.patch").write_text(model_patch)
    (grade / "test.patch").write_text(test_patch)
    monkeypatch.setattr(script_module, "SANDBOX_WORKDIR", str(repo))
    monkeypatch.setattr(script_module, "GRADE_DIR", str(grade))
    script = eval_script({"repo": "someone/unknown", "base_commit": base, "test_patch": test_patch})
    run = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    return run.stdout + run.stderr


def _generated_instance() -> dict:
    return {"instance_id": "someone__unknown-1", "repo": "someone/unknown", "version": "1.0",
            "FAIL_TO_PASS": [f"{TESTS}::test_x"], "PASS_TO_PASS": []}


def test_a_model_patch_that_does_not_apply_is_the_models(tmp_path, monkeypatch):
    log = _run_script(tmp_path, monkeypatch, MODEL_PATCH.replace("-x = 1", "-x = 9"), _test_patch("x = 1"))
    verdict = read_log(_generated_instance(), log)
    assert not verdict.model_patch_applied and verdict.test_patch_applied
    assert not verdict.parsed and not verdict.resolved


def test_a_test_patch_that_does_not_apply_is_told_apart_from_the_models(tmp_path, monkeypatch):
    log = _run_script(tmp_path, monkeypatch, MODEL_PATCH, _test_patch("x = 9"))
    verdict = read_log(_generated_instance(), log)
    assert verdict.model_patch_applied and not verdict.test_patch_applied
    assert not verdict.parsed and not verdict.resolved


def test_markers_printed_by_the_tests_do_not_count_as_patch_failures():
    faked = pytest_log().replace(">>>>> End Test Output",
                                 f"{script_module.TEST_PATCH_FAIL}\n>>>>> Patch Apply Failed\n>>>>> End Test Output")
    verdict = read_log(instance(), faked)
    assert verdict.model_patch_applied and verdict.test_patch_applied
