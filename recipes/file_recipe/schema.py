"""The recipe file (`harnessrl train --recipe-file my_recipe.yaml`): its keys, validated with every bad key and value
named at once.

    name: my-agent                   # run names and MLflow tags
    tasks: tasks.jsonl               # JSONL, parquet or a folder the `datasets` loader reads (relative: to this file)
    hidden: [answer]                 # task fields only the grader sees (never in the harness's task file)
    harness:
      command: [python, agent.py]    # `python`: the project's interpreter; files of this folder by relative path
      files: [helpers.py]            # optional: more files of this folder the harness reads (bound read-only)
      timeout_s: 120                 # optional: the attempt's wall-clock limit (default: the controller's)
    files: [notes.txt]               # optional: copied into each attempt's working directory
    grader:
      command: [python, grade.py]    # run in a sandbox of its own; prints {"reward": x, "details": {...}} last
      timeout_s: 60
      reward_range: [0, 1]           # optional: the verdict's scale; a broken grader pays its bottom
    shaping:                         # optional, training only: the share of answers in which the pattern is found
      answer_pattern: '=\\s*-?\\d+'
    settings:                        # optional run settings (a profile's keys), under `--set`
      algorithm: {iterations: 2}
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

CONTROLLER_FIELDS = frozenset({"id", "harness_timeout_s"})  # task fields the controller itself reads


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HarnessSection(Strict):
    command: list[str] = Field(min_length=1, description="The harness's argv; `python` is the project's interpreter, "
                               "a relative path names a file of the recipe's folder.")
    timeout_s: float | None = Field(default=None, gt=0, description="Wall-clock limit of one attempt (none: the "
                                    "controller's harness_timeout_s).")
    files: list[str] = Field(default_factory=list, description="Files or folders of the recipe's folder the harness "
                             "reads besides its command's script (its modules, prompts), bound read-only in its "
                             "sandbox; never the tasks or the grader's files.")


class GraderSection(Strict):
    command: list[str] = Field(min_length=1, description="The grader's argv, run outside the harness's sandbox in "
                               "one of its own; prints one JSON reward document on its last line.")
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Wall-clock limit of one grading.")
    memory_mb: int = Field(default=2048, ge=64, description="Address-space limit of the grader's processes.")
    max_output_bytes: int = Field(default=1 << 20, ge=1024, le=16 << 20, description="Output kept (head and "
                                  "tail); a longer output is the attempt's failure.")
    reward_range: tuple[float, float] = Field(default=(0.0, 1.0), description="[lowest, highest] reward the grader "
                                              "gives; a verdict outside it is the attempt's failure, and a failed "
                                              "attempt (a grader that crashed, timed out or printed no verdict) "
                                              "gets the lowest.")

    @field_validator("reward_range")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"must be [lowest, highest] with finite lowest < highest, got {list(value)}")
        return value


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
    hidden: list[str] = Field(default_factory=list, description="Task fields only the grader sees (the answer): left "
                              "out of the harness's task file, where the policy reads everything.")
    harness: HarnessSection
    grader: GraderSection
    files: list[str] = Field(default_factory=list, description="Files or folders of the recipe's folder copied into "
                             "every working directory.")
    shaping: ShapingSection | None = None
    settings: dict[str, Any] = Field(default_factory=dict, description="Run settings (a profile's keys).")

    @field_validator("hidden")
    @classmethod
    def _not_controller_fields(cls, value: list[str]) -> list[str]:
        kept = sorted(set(value) & CONTROLLER_FIELDS)
        if kept:
            raise ValueError(f"{kept} cannot be hidden: the controller sets them on every task")
        return value


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
