"""A recipe from a file: tasks, any harness command, optional files, a grader command (schema.py has the format).

`load_recipe_file(path)` is registered under the entry-point group `harnessrl.recipe_loaders` (pyproject.toml), so
`rollouts.registry.get_recipe("/abs/my_recipe.yaml")` gives a `FileRecipe` in the flow and in the controller alike.
The harness runs in the local runner's sandbox under the harness contract (OPENAI_BASE_URL, OPENAI_API_KEY,
HARNESSRL_TASK, its working directory). What the policy can read there is only the harness's own: its task file holds
the task without the file's `hidden` fields (`harness_task`), and only the harness command's files and
`harness.files` are bound read-only (`harness_readonly`), never the recipe's folder: `check` refuses a recipe whose
harness-visible paths hold the tasks or the grader's files. The sandbox's users must be able to read them
(world-readable files, as `mkdir` and an editor make them). The grader command runs after the harness exited in a
sandbox of its own (grader_sandbox.py), with the whole task; a grader failure pays the bottom of `reward_range`.
Local runner only: a Kubernetes agent image does not hold the user's folder.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.recipe import Grade, GradeInput, final_text
from recipes.file_recipe.grader_sandbox import GraderRun, run_grader
from recipes.file_recipe.schema import RecipeFile, RecipeFileError, read_recipe_file
from rollouts.groups import FinishedGroup
from rollouts.task_data import TaskDataError, load_source_rows

PYTHON_NAMES = ("python", "python3")
TASK_SUFFIXES = (".jsonl", ".json", ".parquet")  # a tasks value with one of these is a file, never a hub id
NO_SIGNAL_HINT = ("check your grader by hand on a few answers (does any attempt score differently?), give the model "
                  "easier tasks or a larger model, or add a training-only shaping term (`shaping: answer_pattern:` in "
                  "the recipe file, and algorithm.advantage.format_reward > 0 in its settings)")


def load_recipe_file(path: Path) -> FileRecipe:
    """The recipe `path` describes; RecipeFileError naming every problem of the file."""
    path = Path(path).resolve()
    spec = read_recipe_file(path)
    recipe = FileRecipe(spec, path)
    recipe.check()
    return recipe


@dataclass(frozen=True)
class FileRecipe:
    """The `Recipe` a recipe file describes (its folder: where relative paths point)."""

    spec: RecipeFile
    path: Path  # the recipe file (absolute)
    no_signal_hint = NO_SIGNAL_HINT

    @property
    def folder(self) -> Path:
        """Where the file's relative paths point: its own folder."""
        return self.path.parent

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run_settings(self) -> dict[str, Any]:
        """The file's `settings:` (the flow applies them over the profile, under --set)."""
        return self.spec.settings

    def check(self) -> None:
        """Every problem found before a run starts: missing files, files the sandbox's users cannot read."""
        problems = [f"  {key}: {problem}" for key, problem in self._problems()]
        if problems:
            raise RecipeFileError(f"recipe file {self.path} has {len(problems)} problem(s):\n" + "\n".join(problems))

    def _problems(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for key, command in (("harness.command", self.spec.harness.command),
                             ("grader.command", self.spec.grader.command)):
            first = command[0]
            if first not in PYTHON_NAMES and not Path(first).is_absolute() and not (self.folder / first).exists() \
                    and shutil.which(first) is None:
                found.append((key, f"{first!r} is neither python, an absolute path, a file of {self.folder} nor "
                                   "a program on PATH"))
        for index, name in enumerate(self.spec.files):
            target = (self.folder / name).resolve()
            if not target.exists():
                found.append((f"files.{index}", f"{name!r} does not exist in {self.folder}"))
            elif not target.is_relative_to(self.folder):
                found.append((f"files.{index}", f"{name!r} is outside the recipe's folder {self.folder}"))
        tasks = self.folder / self.spec.tasks
        if not tasks.exists() and (Path(self.spec.tasks).suffix in TASK_SUFFIXES or self.spec.tasks.startswith(".")):
            found.append(("tasks", f"{self.spec.tasks!r} does not exist in {self.folder}"))
        for index, name in enumerate(self.spec.harness.files):
            target = (self.folder / name).resolve()
            if not target.exists() or not target.is_relative_to(self.folder):
                found.append((f"harness.files.{index}", f"{name!r} is not a file or folder of {self.folder}"))
        found += self._leaks()
        used = [self.folder / arg for arg in (*self.spec.harness.command, *self.spec.grader.command,
                                              *self.spec.files, *self.spec.harness.files, self.spec.tasks)]
        found += unreadable(self.folder, [path for path in used if path.exists()])
        return found

    def _harness_visible(self) -> list[tuple[str, Path]]:
        """(key, absolute path) of everything of the folder the harness can read: its command's files, `harness.files`
        (bound read-only) and `files` (copied into its working directory)."""
        named = [("harness.command", arg) for arg in self.spec.harness.command[1:]]
        named += [(f"harness.files.{i}", name) for i, name in enumerate(self.spec.harness.files)]
        named += [(f"files.{i}", name) for i, name in enumerate(self.spec.files)]
        first = self.spec.harness.command[0]
        if first not in PYTHON_NAMES:
            named.append(("harness.command", first))
        return [(key, (self.folder / name).resolve()) for key, name in named
                if not Path(name).is_absolute() and (self.folder / name).exists()]

    def _grader_only(self) -> list[Path]:
        """The tasks source and the grader command's files: what the harness must never see."""
        names = [self.spec.tasks, *self.spec.grader.command]
        return [(self.folder / name).resolve() for name in names
                if not Path(name).is_absolute() and (self.folder / name).exists()]

    def _leaks(self) -> list[tuple[str, str]]:
        """A harness-visible path that is, or holds, the tasks or a grader file (the answers, the grading rules)."""
        found = []
        for key, visible in self._harness_visible():
            # a folder's links too: `files` are copied with their links' targets
            reached = [visible, *(child.resolve() for child in visible.rglob("*") if child.is_symlink())] \
                if visible.is_dir() else [visible]
            for secret in self._grader_only():
                if any(secret == path or secret.is_relative_to(path) for path in reached):
                    found.append((key, f"{visible} would show the harness {secret} (the tasks or the grader's "
                                       "files, which the policy must not read): keep the harness's files apart, "
                                       "e.g. in a folder of their own"))
        return found

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        """The first `count` rows of the task source (an "id" added where a row has none: NAME-INDEX)."""
        rows = self._rows()
        if len(rows) < count:
            raise TaskDataError(f"recipe {self.name!r}: {self.spec.tasks} holds {len(rows)} tasks but the run asks "
                                f"for {count} (data.train_tasks + data.val_tasks): lower them in the recipe file's "
                                "settings or add tasks")
        timeout = self.spec.harness.timeout_s
        return [{**({"harness_timeout_s": timeout} if timeout is not None else {}), **row,
                 "id": str(row.get("id") or f"{self.name}-{index}")} for index, row in enumerate(rows[:count])]

    def _rows(self) -> list[dict[str, Any]]:
        local = self.folder / self.spec.tasks
        source = str(local) if local.exists() else self.spec.tasks
        with tempfile.TemporaryDirectory(prefix="harnessrl-file-recipe-") as cache:
            return load_source_rows(source, cache_dir=Path(cache))

    def harness_command(self) -> list[str]:
        """The harness's argv: `python` as this interpreter, the folder's files by absolute path."""
        return self._argv(self.spec.harness.command)

    def harness_readonly(self) -> tuple[Path, ...]:
        """Only the harness's own files, bound read-only in its sandbox: its command's files of the folder and
        `harness.files` (never the folder: it holds the tasks and the grader)."""
        return tuple(path for key, path in self._harness_visible() if not key.startswith("files."))

    def harness_task(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task without the file's `hidden` fields: what the harness's task file holds."""
        return {key: value for key, value in task.items() if key not in self.spec.hidden}

    @property
    def failure_reward(self) -> float:
        """The bottom of the grader's `reward_range`: what a refused tree or a failed grading pays."""
        return self.spec.grader.reward_range[0]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """The file's `files:` copied into the working directory under their names."""
        for name in self.spec.files:
            source, target = self.folder / name, workdir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, symlinks=False)
            else:
                shutil.copyfile(source, target)

    def grade(self, graded: GradeInput) -> Grade:
        """The grader command's verdict (GraderVerdictError, the attempt's failure, when it gives none)."""
        grader = self.spec.grader
        run = GraderRun(tuple(self._argv(grader.command)), self.folder, grader.timeout_s, grader.memory_mb << 20,
                        grader.max_output_bytes, grader.reward_range)
        reward, details = run_grader(run, graded.task, graded.workdir, final_text(graded.calls), graded.exit_code)
        return Grade(reward=reward, details={**details, "exit_code": graded.exit_code})

    def _argv(self, command: Sequence[str]) -> list[str]:
        first, *rest = command
        head = sys.executable if first in PYTHON_NAMES else self._local(first)
        return [head, *(self._local(arg) for arg in rest)]

    def _local(self, arg: str) -> str:
        """`arg` as an absolute path when it names a file of the recipe's folder, else as it is."""
        candidate = self.folder / arg
        return str(candidate.resolve()) if not Path(arg).is_absolute() and candidate.is_file() else arg

    @property
    def shaping_shares(self) -> AnswerPatternShares | None:
        """The file's shaping term (`shaping.answer_pattern`), or None without one."""
        return None if self.spec.shaping is None else AnswerPatternShares(self.spec.shaping.answer_pattern)


@dataclass(frozen=True)
class AnswerPatternShares:
    """Per rollout, the share of its agent answers (final attempt, successful, not side calls) in which the pattern
    is found (`re.search`); read from the gateway's call records, never from the working directory."""

    pattern: str

    def __call__(self, groups: Sequence[FinishedGroup]) -> dict[str, float]:
        regex = re.compile(self.pattern, re.DOTALL)
        shares: dict[str, float] = {}
        for group in groups:
            for rollout in group.rollouts:
                answers = [call.response_text or "" for call in group.calls.get(rollout.id, ())
                           if call.attempt == rollout.attempt and call.status == "ok" and not call.side]
                matched = sum(regex.search(answer) is not None for answer in answers)
                shares[rollout.id] = matched / len(answers) if answers else 0.0
        return shares


def unreadable(folder: Path, used: Sequence[Path]) -> list[tuple[str, str]]:
    """As root (the sandboxes run as other users): the folder and the files the recipe uses (folders: their trees)
    must be readable by others."""
    if os.geteuid() != 0:
        return []
    problems = []
    for path in (folder, *used, *(child for top in used if top.is_dir() for child in top.rglob("*"))):
        mode = path.lstat().st_mode
        needed = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
        if not stat.S_ISLNK(mode) and mode & needed != needed:
            problems.append((str(path.relative_to(folder)), f"{path} is not readable by the sandbox's users "
                             f"(mode {stat.filemode(mode)}): chmod -R o+rX {folder}"))
    return problems[:10]
