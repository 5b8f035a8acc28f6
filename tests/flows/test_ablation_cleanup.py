"""The ablation flow deletes a finished run's local checkpoints (the store keeps them) and keeps a failed run's."""

from __future__ import annotations

import json
import subprocess

import pytest

from flows import ablation as ablation_module
from flows.ablation_plan import LEARNING_ARMS, PlannedRun


@pytest.mark.parametrize(("returncode", "kept"), [(0, False), (1, True)])
def test_a_finished_runs_local_checkpoints_are_deleted(monkeypatch, tmp_path, returncode, kept):
    name = "abl-clean-lr0-s0"
    run = PlannedRun(LEARNING_ARMS[1], 0, name, {"name": name, "work_dir": str(tmp_path / "runs")})
    local = tmp_path / "runs" / name / "checkpoints" / "step-000001"

    real_run = subprocess.run

    def train_in_a_process(command, **kwargs):
        if "--run-config" not in command:  # anything else the code runs (the subprocess module is patched whole)
            return real_run(command, **kwargs)
        local.mkdir(parents=True)
        (local / "model.safetensors").write_bytes(b"w")
        (tmp_path / "runs" / name / "gateway.db").write_bytes(b"db")
        summary = command[command.index("--summary") + 1]
        with open(summary, "w") as out:
            json.dump({"mlflow_run_id": "r1"}, out)
        return subprocess.CompletedProcess(command, returncode)

    monkeypatch.setattr(ablation_module.subprocess, "run", train_in_a_process)
    monkeypatch.setattr(ablation_module, "tag_run", lambda *_: None)
    monkeypatch.setattr(ablation_module, "find_run_id", lambda *_: None)
    out = ablation_module.run_one("ablation-local", run, "abl-clean", "umbrella", "ablation", "sqlite:///unused")
    assert (out["error"] is None) is (returncode == 0)
    assert local.exists() is kept
    assert (tmp_path / "runs" / name / "gateway.db").is_file(), "only the checkpoints go"
