"""What a Python harness needs bound: its interpreter and exactly its own code's import closure."""

from __future__ import annotations

import sys
from pathlib import Path

from controller.runners.harness_sandbox import code_paths
from sandbox.paths import interpreter_paths, module_closure


def test_closure_follows_imports_within_the_source_tree_only(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "main.py").write_text("import json\nfrom pkg.sub import helper\ndef f():\n    from . import lazy\n")
    (pkg / "sub" / "helper.py").write_text("from ..other import thing\n")
    (pkg / "sub" / "lazy.py").write_text("")
    (pkg / "other.py").write_text("")
    (pkg / "sub" / "grader.py").write_text("GOLD = 1\n")  # never imported: never bound
    monkeypatch.syspath_prepend(str(tmp_path))
    names = sorted(str(path.relative_to(tmp_path)) for path in module_closure("pkg.sub.main"))
    assert names == ["pkg/__init__.py", "pkg/other.py", "pkg/sub/helper.py", "pkg/sub/lazy.py", "pkg/sub/main.py"]


def test_swe_harness_closure_has_no_grader_and_includes_the_sandbox():
    files = {path.name for path in module_closure("recipes.swe.harness")}
    assert {"harness.py", "sandbox.py"} <= files
    assert not {"grader.py", "testrun.py", "generator.py", "recipe.py"} & files


def test_code_paths_of_a_script_and_the_interpreter():
    script = Path(__file__).resolve()
    assert code_paths([sys.executable, str(script), "mode"]) == (script,)
    assert Path(sys.base_prefix).resolve() in interpreter_paths()
