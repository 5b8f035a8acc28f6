"""A `module:OBJECT` recipe loads in another process (as the controller the flow starts) from $HARNESSRL_RECIPE_PATH,
with no install and from any working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.server_process import with_repo_on_path
from tests.rollouts.test_registry import RECIPE_MODULE

pytestmark = pytest.mark.slow


def test_a_child_process_loads_the_users_module_from_the_recipe_path(tmp_path: Path):
    folder, elsewhere = tmp_path / "my-agent", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "my_recipe_mod.py").write_text(RECIPE_MODULE)
    program = "from rollouts.registry import get_recipe; print(get_recipe('my_recipe_mod:RECIPE').name)"
    env = with_repo_on_path({**os.environ, "HARNESSRL_RECIPE_PATH": str(folder)})
    result = subprocess.run([sys.executable, "-c", program], cwd=elsewhere, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "mine", result.stderr
    env.pop("HARNESSRL_RECIPE_PATH")
    missing = subprocess.run([sys.executable, "-c", program], cwd=elsewhere, env=env, capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode != 0 and "add that folder to $HARNESSRL_RECIPE_PATH" in missing.stderr
