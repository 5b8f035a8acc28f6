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
