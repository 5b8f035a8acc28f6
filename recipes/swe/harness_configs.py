"""The mini-swe-agent configurations the SWE harness can run with, by name: the task's `harness_config` field.

  "mini_textbased" (the default): mini-swe-agent's own `mini_textbased.yaml`, a ~900-token system and instance prompt
      and actions in a ```mswea_bash_command fenced block;
  "one_command": `configs/one_command.yaml`, a few lines asking for one shell command in a ```bash block (```sh and a
      bare ``` fence are taken too), for models too small to follow the default (SmolLM2-135M in `make train`).

Every configuration has mini-swe-agent's schema (`agent`: system_template, instance_template, ...; `model`:
action_regex, format_error_template, observation_template, ...), so the harness hands it to mini-swe-agent unchanged.
Nothing here imports mini-swe-agent (its import loads litellm): its own file is found by its package's location.
The local runner's sandbox binds only the harness's Python files, so the recipe copies the task's configuration into
the rollout's working directory (`WORKDIR_FILE`, `copy_to_workdir`) and the harness reads it there (`workdir_config`).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CONFIG = "mini_textbased"
WORKDIR_FILE = "harness_config.yaml"  # the task's configuration, next to task.json
CONFIGS_DIR = Path(__file__).parent / "configs"  # the project's own configurations, `<name>.yaml`
# mini-swe-agent's LitellmTextbasedModelConfig.action_regex: the regex of a config that names none
MINI_SWE_AGENT_ACTION_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"


def config_names() -> list[str]:
    """The names a task's `harness_config` may take."""
    return sorted({DEFAULT_CONFIG, *(path.stem for path in CONFIGS_DIR.glob("*.yaml"))})


def config_path(name: str) -> Path:
    """The YAML file of configuration `name`; raises naming the choices when there is none."""
    if name == DEFAULT_CONFIG:
        spec = importlib.util.find_spec("minisweagent")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("mini-swe-agent is not installed: the SWE harness needs it")
        return Path(spec.submodule_search_locations[0]) / "config" / "mini_textbased.yaml"
    path = CONFIGS_DIR / f"{name}.yaml"
    if name not in config_names() or not path.is_file():
        raise ValueError(f"harness_config={name!r} is not a SWE harness configuration; use one of {config_names()}")
    return path


def load_harness_config(name: str) -> dict[str, Any]:
    """Configuration `name` as mini-swe-agent reads it."""
    return yaml.safe_load(config_path(name).read_text())


@cache
def action_regex(name: str) -> str:
    """The regex with which configuration `name`'s model parses an answer into its action."""
    return load_harness_config(name).get("model", {}).get("action_regex", MINI_SWE_AGENT_ACTION_REGEX)


def copy_to_workdir(name: str, workdir: Path) -> Path:
    """Writes configuration `name` to `workdir/WORKDIR_FILE` (raises naming the choices for an unknown name)."""
    target = workdir / WORKDIR_FILE
    target.write_text(config_path(name).read_text())
    return target


def workdir_config(name: str, workdir: Path) -> dict[str, Any]:
    """The configuration the recipe copied into `workdir`, else configuration `name` read where it lives."""
    copied = workdir / WORKDIR_FILE
    return yaml.safe_load(copied.read_text()) if copied.is_file() else load_harness_config(name)
