"""The coding CLIs' per-rollout configuration as pure builders: Codex's config.toml, each CLI's environment and argv,
the task prompt; and the recipes' harness command (the binary by absolute path, so the runner's sandbox binds it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from recipes.cli_harness.binaries import CLAUDE_CODE, CODEX, installed_binary, missing_binary
from recipes.cli_harness.launch import (
    HOME_DIR,
    QUIET_CLAUDE_ENV,
    REPO_DIR,
    Contract,
    claude_code_launch,
    codex_config_toml,
    codex_launch,
    task_prompt,
)
from recipes.cli_harness.recipe import CliSweRecipe
from recipes.swe.harness import REPO_DIR as SWE_REPO_DIR

CONTRACT = Contract("http://127.0.0.1:18080/r/ro-1/v1", "rk-secret")
TASK = {"id": "t1", "problem_statement": "  is_even(4) is False.\n", "store": "/hidden/store", "step_limit": 7,
        "max_tokens": 300, "command_timeout_s": 20}
HOST_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OPENAI_API_KEY": "rk-secret", "HARNESSRL_ADMIN_TOKEN": "adm",
            "HOME": "/root", "ANTHROPIC_API_KEY": "sk-real-user-key", "CODEX_HOME": "/root/.codex"}
WORK = Path("/runs/w/ro-1.a1")
PYTHON_BIN = Path("/venv/bin")


def test_the_repository_layout_is_the_swe_recipes():
    assert REPO_DIR == SWE_REPO_DIR


def test_contract_needs_the_rollout_url_and_key():
    with pytest.raises(KeyError, match="OPENAI_API_KEY not set"):
        Contract.from_env({"OPENAI_BASE_URL": "http://g/r/x/v1"})
    assert Contract.from_env({"OPENAI_BASE_URL": "http://g/r/x/v1/", "OPENAI_API_KEY": "k"}).base_url == "http://g/r/x/v1"


@pytest.mark.parametrize(("base_url", "anthropic"), [("http://127.0.0.1:18080/r/ro-1/v1", "http://127.0.0.1:18080/r/ro-1"),
                                                     ("http://gw:8080/prefix/r/a/v1", "http://gw:8080/prefix/r/a")])
def test_anthropic_base_url_drops_v1_because_the_cli_appends_it(base_url, anthropic):
    assert Contract(base_url, "k").anthropic_base_url == anthropic


def test_anthropic_base_url_refuses_a_url_without_v1():
    with pytest.raises(ValueError, match="does not end in /v1"):
        _ = Contract("http://gw/r/a", "k").anthropic_base_url


def test_prompt_is_the_problem_statement_and_where_the_repository_is():
    prompt = task_prompt(TASK)
    assert prompt.startswith("is_even(4) is False.\n\n") and "current directory" in prompt
    assert "/hidden/store" not in prompt


def test_claude_code_env_is_the_allow_list_the_gateway_and_quiet_flags():
    launch = claude_code_launch(Path("/cli/claude"), TASK, CONTRACT, WORK, PYTHON_BIN, HOST_ENV)
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:18080/r/ro-1" and env["ANTHROPIC_API_KEY"] == "rk-secret"
    assert env["HOME"] == str(WORK / HOME_DIR) and env["PATH"] == "/venv/bin:/usr/bin:/bin"
    assert QUIET_CLAUDE_ENV.items() <= env.items()
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "300"
    assert env["BASH_DEFAULT_TIMEOUT_MS"] == env["BASH_MAX_TIMEOUT_MS"] == "20000"
    assert not {"OPENAI_API_KEY", "HARNESSRL_ADMIN_TOKEN", "CODEX_HOME"} & env.keys()
    assert launch.cwd == WORK / REPO_DIR and launch.files == {}


def test_claude_code_argv_is_print_mode_with_the_allowed_tools_and_turn_limit():
    argv = claude_code_launch(Path("/cli/claude"), TASK, CONTRACT, WORK, PYTHON_BIN, HOST_ENV).argv
    assert argv[:3] == ("/cli/claude", "-p", task_prompt(TASK))
    assert argv[3:] == ("--output-format", "json", "--allowedTools", "Bash,Read,Edit,Write", "--max-turns", "7",
                        "--no-session-persistence", "--model", "policy")


def test_claude_code_model_is_passed_only_when_the_task_names_one():
    named = claude_code_launch(Path("/c"), TASK | {"model": "policy"}, CONTRACT, WORK, PYTHON_BIN, {})
    assert named.argv[-2:] == ("--model", "policy")
    assert named.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == named.env["ANTHROPIC_SMALL_FAST_MODEL"] == "policy"
    default = claude_code_launch(Path("/c"), {"problem_statement": "p"}, CONTRACT, WORK, PYTHON_BIN, {})
    assert default.argv[-2:] == ("--model", "policy")  # the name the flows register the policy under
    assert default.env["PATH"] == "/venv/bin:/usr/bin:/bin" and default.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "1024"
    own = claude_code_launch(Path("/c"), {"problem_statement": "p", "model": None}, CONTRACT, WORK, PYTHON_BIN, {})
    assert "--model" not in own.argv and not any(name.endswith("_MODEL") for name in own.env)


def test_codex_config_toml_names_the_gateway_as_the_only_provider():
    config = tomllib.loads(codex_config_toml(CONTRACT, TASK | {"codex_model": "po\"licy"}))
    assert config["model"] == "po\"licy" and config["model_provider"] == "harnessrl"
    assert config["model_providers"] == {"harnessrl": {"name": "harnessrl gateway", "wire_api": "responses",
                                                       "base_url": "http://127.0.0.1:18080/r/ro-1/v1",
                                                       "env_key": "OPENAI_API_KEY"}}
    assert config["approval_policy"] == "never" and config["sandbox_mode"] == "danger-full-access"
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False} and config["feedback"] == {"enabled": False}
    assert config["history"] == {"persistence": "none"} and config["agents"] == {"enabled": False}
    assert config["shell_environment_policy"] == {"inherit": "core", "exclude": ["OPENAI_API_KEY"]}


def test_codex_config_default_model_is_one_codex_knows_then_model_and_null_leaves_codex_its_own():
    assert tomllib.loads(codex_config_toml(CONTRACT, {"problem_statement": "p"}))["model"] == "gpt-5.5"
    task = {"problem_statement": "p", "codex_model": None}
    assert tomllib.loads(codex_config_toml(CONTRACT, task))["model"] == "policy"
    assert "model" not in tomllib.loads(codex_config_toml(CONTRACT, task | {"model": None}))


def test_codex_launch_writes_its_config_under_the_throwaway_home():
    launch = codex_launch(Path("/cli/codex"), TASK, CONTRACT, WORK, PYTHON_BIN, HOST_ENV)
    home = WORK / HOME_DIR
    assert launch.env["HOME"] == str(home) and launch.env["CODEX_HOME"] == str(home / ".codex")
    assert launch.env["OPENAI_API_KEY"] == "rk-secret" and "HARNESSRL_ADMIN_TOKEN" not in launch.env
    assert "ANTHROPIC_API_KEY" not in launch.env
    assert list(launch.files) == [home / ".codex" / "config.toml"]
    assert launch.files[home / ".codex" / "config.toml"] == codex_config_toml(CONTRACT, TASK)
    assert launch.argv == ("/cli/codex", "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                           "--strict-config", "--ephemeral", "--json", "--color", "never", task_prompt(TASK))
    assert launch.cwd == WORK / REPO_DIR


def test_missing_binary_names_the_make_target(tmp_path):
    problem = missing_binary(CODEX, tmp_path / "codex")
    assert problem is not None and "make harnesses" in problem and "@openai/codex@0.169.0" in problem
    with pytest.raises(FileNotFoundError, match="make harnesses"):
        installed_binary("codex", tmp_path)
    with pytest.raises(KeyError, match="known: claude-code, codex"):
        installed_binary("aider", tmp_path)


def test_claude_placeholder_is_not_a_binary(tmp_path):
    binary = CLAUDE_CODE.binary(tmp_path)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho placeholder\n")
    binary.chmod(0o755)
    problem = missing_binary(CLAUDE_CODE, binary)
    assert problem is not None and "install.cjs" in problem


def fake_install(folder: Path, cli) -> Path:
    binary = cli.binary(folder)
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_bytes(b"\x7fELF" + b"\0" * 8192)
    binary.chmod(0o755)
    return binary


def test_harness_command_carries_the_resolved_binary(tmp_path):
    binary = fake_install(tmp_path, CODEX)
    command = CliSweRecipe("codex", cli_dir=tmp_path).harness_command()
    assert command[1:] == ["-m", "recipes.cli_harness.harness", "codex", str(binary.resolve())]
    assert Path(command[0]).name.startswith("python")


def test_harness_command_names_the_binary_even_where_it_is_not_installed(tmp_path):
    """The controller may run where the CLI is not (Kubernetes: it is in the agent image); the harness checks it."""
    command = CliSweRecipe("claude-code", cli_dir=tmp_path).harness_command()
    assert command[-1] == str(CLAUDE_CODE.binary(tmp_path).resolve())
