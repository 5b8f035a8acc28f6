"""What one rollout of a coding CLI runs (pure): its argv, its whole environment, the files it reads, its cwd.

Each builder turns the harness contract (the rollout's gateway URL and key), the task and the working directory into
a `Launch`: nothing is read from the user's home (HOME is a throw-away folder inside the working directory), no
telemetry, no auto-update, no network but the gateway. The CLIs are the unmodified ones, pinned in `binaries.py`.

- Claude Code (Anthropic Messages): `ANTHROPIC_BASE_URL` = the rollout's gateway path without `/v1` (it appends
  `/v1/messages`), `ANTHROPIC_API_KEY` = the rollout key (sent as `x-api-key`); `claude -p TASK --output-format json
  --allowedTools Bash,Read,Edit,Write --max-turns N`.
- Codex (OpenAI Responses): `$CODEX_HOME/config.toml` names a provider at the rollout's `/v1` with
  `wire_api = "responses"`; `codex exec --skip-git-repo-check --sandbox danger-full-access --json TASK`
  (its own sandbox needs Landlock/seccomp; it runs inside ours instead).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_DIR = "repo"  # the SWE recipe's layout: the task's repository copy in the working directory
HOME_DIR = ".cli-home"  # the CLI's throw-away HOME inside the working directory (not graded: only repo/ is)
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM")  # from the harness's own environment, nothing else
CLAUDE_TOOLS = ("Bash", "Read", "Edit", "Write")  # the tools Claude Code may use without asking
DEFAULTS: dict[str, Any] = {"model": "policy", "codex_model": "gpt-5.5", "step_limit": 30, "max_tokens": 1024,
                            "command_timeout_s": 60}
QUIET_CLAUDE_ENV = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
CLAUDE_MODEL_ENV = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
                    "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL")
CODEX_KEY_ENV = "OPENAI_API_KEY"  # the variable Codex reads the rollout key from (the provider's env_key)
PROMPT = """{problem}

The repository with this problem is the current directory. Fix the bug by editing its source files (not its tests),
run its tests to check the fix, and stop when they pass. There is no git and no network here."""


@dataclass(frozen=True)
class Contract:
    """The harness contract as the harness received it."""

    base_url: str  # OPENAI_BASE_URL: the rollout's gateway URL, ending in /v1
    api_key: str  # OPENAI_API_KEY: the rollout's key

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Contract:
        missing = [name for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY") if not env.get(name)]
        if missing:
            raise KeyError(f"{', '.join(missing)} not set: the harness contract (controller/recipe.py) gives a "
                           f"harness its rollout's gateway URL and key")
        return cls(env["OPENAI_BASE_URL"].rstrip("/"), env["OPENAI_API_KEY"])

    @property
    def anthropic_base_url(self) -> str:
        """The rollout's gateway path without `/v1`: Anthropic clients append `/v1/messages` themselves."""
        if not self.base_url.endswith("/v1"):
            raise ValueError(f"OPENAI_BASE_URL {self.base_url!r} does not end in /v1; the gateway's rollout URLs "
                             f"are {{gateway}}/r/{{rollout id}}/v1")
        return self.base_url.removesuffix("/v1")


@dataclass(frozen=True)
class Launch:
    """One CLI run: argv, its whole environment, files to write first (path -> text), its working directory."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    files: dict[Path, str] = field(default_factory=dict)


def task_settings(task: Mapping[str, Any]) -> dict[str, Any]:
    """The task's harness settings over DEFAULTS. `model` defaults to "policy", the name the flows register the
    policy under (gateway.model_name), as for mini-swe-agent; null lets the CLI name its own models (Claude and GPT
    names), which the gateway then maps to the policy through its `model_aliases` / `default_model`.
    `codex_model` (default "gpt-5.5") is the name Codex is configured with instead: a model Codex has metadata for,
    so that it offers the tools its users see (gpt-5.5: `apply_patch` as a free-form `custom` tool, which the gateway
    carries to the policy; under an unknown name such as "policy" Codex offers no edit tool at all); the gateway
    maps it to the policy (`model_aliases` `gpt-*`, or the one registered model). Null: `model`."""
    return DEFAULTS | dict(task)


def task_prompt(task: Mapping[str, Any]) -> str:
    """What the CLI is asked: the problem statement and where the repository is."""
    return PROMPT.format(problem=task["problem_statement"].strip())


def base_env(workdir: Path, python_bin: Path, source: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed variables, the interpreter's folder first on PATH (pytest for the agent's commands), HOME."""
    env = {name: source[name] for name in PASSED_ENV if name in source}
    env["PATH"] = f"{python_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    return {**env, "HOME": str(workdir / HOME_DIR), "PAGER": "cat", "GIT_DIR": "/nonexistent"}


def claude_code_launch(binary: Path, task: Mapping[str, Any], contract: Contract, workdir: Path,
                       python_bin: Path, source: Mapping[str, str]) -> Launch:
    """`claude -p` on the task, pointed at the rollout's gateway path."""
    settings = task_settings(task)
    timeout_ms = str(int(settings["command_timeout_s"]) * 1000)
    env = {**base_env(workdir, python_bin, source), **QUIET_CLAUDE_ENV,
           "ANTHROPIC_BASE_URL": contract.anthropic_base_url, "ANTHROPIC_API_KEY": contract.api_key,
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(settings["max_tokens"]),
           "BASH_DEFAULT_TIMEOUT_MS": timeout_ms, "BASH_MAX_TIMEOUT_MS": timeout_ms}
    argv = [str(binary), "-p", task_prompt(task), "--output-format", "json", "--allowedTools", ",".join(CLAUDE_TOOLS),
            "--max-turns", str(settings["step_limit"]), "--no-session-persistence"]
    if settings["model"]:  # every call names it, the small-model side calls too (else the gateway's aliases map)
        argv += ["--model", str(settings["model"])]
        env |= {name: str(settings["model"]) for name in CLAUDE_MODEL_ENV}
    return Launch(tuple(argv), env, workdir / REPO_DIR)


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for the characters a URL or a name holds)."""
    return json.dumps(value, ensure_ascii=True)


def codex_config_toml(contract: Contract, task: Mapping[str, Any]) -> str:
    """`$CODEX_HOME/config.toml` of one rollout: the gateway as the only provider, no telemetry, no update check,
    no history, no subagents (each would be a conversation of its own, its own thread of calls in the rollout), and
    the agent's commands without the rollout key in their environment."""
    settings = task_settings(task)
    name = settings["codex_model"] or settings["model"]
    model = [f"model = {toml_string(str(name))}"] if name else []
    return "\n".join([
        *model,
        'model_provider = "harnessrl"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.harnessrl]",
        'name = "harnessrl gateway"',
        f"base_url = {toml_string(contract.base_url)}",
        f"env_key = {toml_string(CODEX_KEY_ENV)}",
        'wire_api = "responses"',
        "",
        "[agents]",
        "enabled = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[history]",
        'persistence = "none"',
        "",
        "[shell_environment_policy]",
        'inherit = "core"',
        f"exclude = [{toml_string(CODEX_KEY_ENV)}]",
        "",
    ])


def codex_launch(binary: Path, task: Mapping[str, Any], contract: Contract, workdir: Path,
                 python_bin: Path, source: Mapping[str, str]) -> Launch:
    """`codex exec` on the task with its configuration written per rollout under the throw-away HOME."""
    env = base_env(workdir, python_bin, source)
    codex_home = Path(env["HOME"]) / ".codex"
    env |= {"CODEX_HOME": str(codex_home), CODEX_KEY_ENV: contract.api_key, "NO_COLOR": "1"}
    argv = (str(binary), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "--strict-config",
            "--ephemeral", "--json", "--color", "never", task_prompt(task))
    return Launch(argv, env, workdir / REPO_DIR, {codex_home / "config.toml": codex_config_toml(contract, task)})
