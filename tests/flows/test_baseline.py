"""The shared step 0 (flows/baseline.py): what its fingerprint sees, and the file's round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.baseline import read_baseline, record_baseline, validation_fingerprint
from flows.config import load_run_config

VAL_ROWS = [{"id": "t1", "prompt": "add 2 and 3"}, {"id": "t2", "prompt": "add 4 and 4"}]
MODEL = Path("/models/smollm2")


def fingerprint(overrides: dict | None = None, rows: list[dict] = VAL_ROWS, model: Path = MODEL,
                version: int = 0) -> str:
    return validation_fingerprint(load_run_config("ablation-local", overrides or {}), rows, model, version)


@pytest.mark.parametrize("overrides", [
    {"backend.optimizer.lr": 0.0},
    {"algorithm.advantage.level": "sample", "backend.loss.agg_mode": "token-mean"},
    {"data.source": "tasks-s3.jsonl", "data.seed": 3, "data.train_tasks": 40, "name": "other-run"},
    {"algorithm.iterations": 7, "checkpoints.every": 3, "tracking.experiment": "elsewhere"},
])
def test_what_only_trains_shares_the_step0(overrides):
    assert fingerprint(overrides) == fingerprint()


@pytest.mark.parametrize("overrides", [
    {"engine.model": "tiny"},
    {"rollout.task_overrides": {"max_tokens": 24, "temperature": 0.3}},
    {"rollout.val_seed": 5},
    {"rollout.val_group_size": 2},
    {"gateway.sampling": {"temperature": 0.5}},
    {"controller.harness_timeout_s": 30},
    {"algorithm.advantage.agent_failure_reward": -1.0},
    {"recipe": "calculator"},
])
def test_what_reaches_validation_does_not(overrides):
    assert fingerprint(overrides) != fingerprint()


def test_other_weights_or_tasks_do_not_share_either():
    assert fingerprint(model=Path("/models/other")) != fingerprint()
    assert fingerprint(version=3) != fingerprint()
    assert fingerprint(rows=VAL_ROWS[:1]) != fingerprint()
    assert fingerprint(rows=[{**VAL_ROWS[0], "prompt": "add 2 and 4"}, VAL_ROWS[1]]) != fingerprint()


def test_the_file_keeps_one_entry_per_fingerprint(tmp_path):
    path = tmp_path / "ablation" / "step0.json"
    assert read_baseline(path, "a") is None, "no file yet"
    record_baseline(path, "a", "run-1", {"val/reward_mean": 0.25})
    record_baseline(path, "b", "run-2", {"val/reward_mean": 0.5, "val/pass_rate": 1})
    first, second = read_baseline(path, "a"), read_baseline(path, "b")
    assert (first.run, first.metrics) == ("run-1", {"val/reward_mean": 0.25})
    assert (second.run, second.metrics) == ("run-2", {"val/reward_mean": 0.5, "val/pass_rate": 1.0})
    assert read_baseline(path, "c") is None


@pytest.mark.parametrize("text, named", [("{not json", "not JSON"), ('{"a": 1}', "not a step-0 file"),
                                         ("[]", "not a step-0 file")])
def test_a_file_that_is_not_ours_is_named(tmp_path, text, named):
    path = tmp_path / "step0.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=named) as raised:
        read_baseline(path, "a")
    assert str(path) in str(raised.value)


def test_the_fingerprint_sees_the_project_packages_as_pyproject_lists_them():
    import tomllib

    from flows.baseline import PACKAGES

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    found = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(name.removesuffix("*") for name in found) == sorted(PACKAGES)


def test_an_edit_to_the_code_is_another_step0(tmp_path):
    from flows.baseline import source_digest

    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / ".hidden").mkdir()
    (tmp_path / "pkg" / "prompt.yaml").write_text("system: be brief")
    (tmp_path / "pkg" / "weights.bin").write_bytes(b"\0" * 16)
    before = source_digest([tmp_path / "pkg"])
    (tmp_path / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    (tmp_path / "pkg" / ".hidden" / "notes.py").write_text("x = 1")
    assert source_digest([tmp_path / "pkg"]) == before, "caches and hidden folders are not code"
    (tmp_path / "pkg" / "prompt.yaml").write_text("system: be verbose")
    edited = source_digest([tmp_path / "pkg"])
    assert edited != before
    (tmp_path / "pkg" / "weights.bin").write_bytes(b"\1" * 32)
    assert source_digest([tmp_path / "pkg"]) != edited, "a file that is not source counts by its size and time"


def test_a_recipe_files_folder_and_the_start_weights_are_part_of_it(tmp_path):
    from tests.recipes.file_recipe.support import GRADER, recipe_folder

    recipe = recipe_folder(tmp_path / "mine")
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"w" * 8)

    def of_recipe() -> str:
        return fingerprint({"recipe": str(recipe)}, model=weights)

    before = of_recipe()
    assert of_recipe() == before
    (recipe.parent / "grade.py").write_text(GRADER.replace("int(numbers[-1])", "abs(int(numbers[-1]))"))
    graded_otherwise = of_recipe()
    assert graded_otherwise != before, "another grader: another step 0"
    (weights / "model.safetensors").write_bytes(b"v" * 9)
    assert of_recipe() != graded_otherwise, "weights rewritten in place: another start"
