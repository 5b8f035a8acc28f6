"""The recipe file (`harnessrl train --recipe-file my_recipe.yaml`): its keys, validated with every bad key and value
named at once.

    name: my-agent                   # run names and MLflow tags
    tasks: tasks.jsonl               # JSONL, parquet or a folder the `datasets` loader reads (relative: to this file)
    harness:
      command: [python, agent.py]    # `python`: the project's interpreter; files of this folder by relative path
      timeout_s: 120                 # optional: the attempt's wall-clock limit (default: the controller's)
    files: [notes.txt]               # optional: copied into each attempt's working directory
    grader:
      command: [python, grade.py]    # run in a sandbox of its own; prints {"reward": x, "details": {...}} last
      timeout_s: 60
    shaping:                         # optional, training only: the share of answers in which the pattern is found
      answer_pattern: '=\\s*-?\\d+'
    settings:                        # optional run settings (a profile's keys), under `--set`
      algorithm: {iterations: 2}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HarnessSection(Strict):
    command: list[str] = Field(min_length=1, description="The harness's argv; `python` is the project's interpreter, "
                               "a relative path names a file of the recipe's folder.")
    timeout_s: float | None = Field(default=None, gt=0, description="Wall-clock limit of one attempt (none: the "
                                    "controller's harness_timeout_s).")


class GraderSection(Strict):
    command: list[str] = Field(min_length=1, description="The grader's argv, run outside the harness's sandbox in "
                               "one of its own; prints one JSON reward document on its last line.")
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Wall-clock limit of one grading.")
    memory_mb: int = Field(default=2048, ge=64, description="Address-space limit of the grader's processes.")
    max_output_bytes: int = Field(default=1 << 20, ge=1024, le=16 << 20, description="Output kept (head and "
                                  "tail); a longer output is the attempt's failure.")


class ShapingSection(Strict):
    answer_pattern: str = Field(description="A regular expression; a rollout's share of agent answers in which it "
                                "is found is its shaping share (algorithm.advantage.format_reward x share).")

    @field_validator("answer_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a regular expression: {error}") from error
        return value


class RecipeFile(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", max_length=64, description="The recipe's name.")
    description: str = Field(default="", description="What the agent does, for humans.")
    tasks: str = Field(min_length=1, description="The task rows: a JSONL, parquet or folder (relative: to the recipe "
                       "file) or a hub dataset id.")
    harness: HarnessSection
    grader: GraderSection
    files: list[str] = Field(default_factory=list, description="Files or folders of the recipe's folder copied into "
                             "every working directory.")
    shaping: ShapingSection | None = None
    settings: dict[str, Any] = Field(default_factory=dict, description="Run settings (a profile's keys).")


class RecipeFileError(KeyError):
    """A recipe file that cannot be used; the message names every bad key and value (a KeyError: the registry's)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def describe_errors(path: Path, error: ValidationError) -> str:
    """Every problem of the file, one per line: the key's dotted path, the problem, the value found."""
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        found = "" if item["type"] == "missing" else f" (found {item.get('input')!r:.80})"
        message = "unknown key: remove it or check its spelling" if item["type"] == "extra_forbidden" else item["msg"]
        lines.append(f"  {key}: {message}{found}")
    return f"recipe file {path} has {len(lines)} problem(s):\n" + "\n".join(lines)


def read_recipe_file(path: Path) -> RecipeFile:
    """The validated recipe file; RecipeFileError naming every problem."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise RecipeFileError(f"recipe file {path} cannot be read as YAML: {error}") from error
    if not isinstance(data, dict):
        raise RecipeFileError(f"recipe file {path} must be a mapping of keys (name, tasks, harness, grader, ...), "
                              f"got {type(data).__name__}")
    try:
        return RecipeFile.model_validate(data)
    except ValidationError as error:
        raise RecipeFileError(describe_errors(path, error)) from error
