"""`make harnesses`' checks as pure functions: the Node version (18 or newer, a message naming what to install), the
pinned npm command, the installed binaries' `--version`."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.cli_harness.binaries import CLAUDE_CODE, CODEX
from recipes.cli_harness.install import MIN_NODE_MAJOR, node_problem, npm_command, version_problem


@pytest.mark.parametrize("printed", ["v18.0.0\n", "v20.20.2", "v22.11.0\n", "v24.1.0-nightly2025"])
def test_node_18_or_newer_is_fine(printed):
    assert node_problem(printed) is None


@pytest.mark.parametrize(("printed", "says"), [
    (None, "`node` is not on PATH"),
    ("v16.20.2\n", "Node.js v16.20.2 is too old"),
    ("v8.9.4", "too old"),
    ("command not found", "not a version"),
])
def test_node_problem_names_what_to_install(printed, says):
    problem = node_problem(printed)
    assert problem is not None and says in problem
    assert f"Node.js {MIN_NODE_MAJOR} or newer" in problem and "apt-get install nodejs npm" in problem


def test_npm_installs_exactly_the_pinned_versions_into_the_folder():
    assert npm_command(Path("/p/.harnesses")) == [
        "npm", "install", "--prefix", "/p/.harnesses", "--no-audit", "--no-fund", "--save-exact", "--loglevel=error",
        "@anthropic-ai/claude-code@2.1.328", "@openai/codex@0.169.0"]


def test_version_check_wants_the_pinned_version():
    assert version_problem(CLAUDE_CODE, "2.1.328 (Claude Code)\n") is None
    assert version_problem(CODEX, "codex-cli 0.169.0\n") is None
    problem = version_problem(CODEX, "codex-cli 0.170.1\n")
    assert problem is not None and "expected 'codex-cli 0.169.0'" in problem
