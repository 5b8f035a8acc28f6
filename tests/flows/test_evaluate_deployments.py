"""The evaluate-swe-verified deployments of prefect.yaml (nightly on a cron schedule, manual for a named checkpoint)
and the flow's pure choices: exactly one target, the dataset kind, the store a checkpoint URI downloads from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.config import load_run_config
from flows.evaluate import check_target, kind_of
from flows.weights import store_for_checkpoint
from storage.local_store import LocalStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def deployments() -> dict[str, dict]:
    project = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["name"]: d for d in project["deployments"] if d["entrypoint"].endswith(":evaluate_swe_verified")}


def test_nightly_runs_at_two_utc_on_the_latest_train_swe_checkpoint(deployments):
    from prefect.cli.deploy._schedules import _schedule_config_to_deployment_schedule
    from prefect.flows import load_flow_from_entrypoint

    nightly = deployments["nightly"]
    (schedule,) = [_schedule_config_to_deployment_schedule(s)["schedule"] for s in nightly["schedules"]]
    assert (schedule.cron, schedule.timezone) == ("0 2 * * *", "UTC")
    flow = load_flow_from_entrypoint(str(ROOT / nightly["entrypoint"]))
    assert flow.name == "evaluate-swe-verified"
    flow.validate_parameters(nightly["parameters"])
    assert nightly["parameters"]["latest_checkpoint"] is True and "checkpoint_uri" not in nightly["parameters"]
    check_target(nightly["parameters"].get("checkpoint_uri"), None, nightly["parameters"]["latest_checkpoint"])


def test_manual_needs_a_checkpoint_uri(deployments):
    manual = deployments["manual"]
    assert "schedules" not in manual and "checkpoint_uri" not in manual["parameters"]
    assert load_run_config(manual["parameters"]["profile"], manual["parameters"]["overrides"], recipe="swe")
    with pytest.raises(ValueError, match="needs exactly one of checkpoint_uri"):
        check_target(manual["parameters"].get("checkpoint_uri"), None, False)
    check_target("s3://harnessrl/checkpoints/run/step-000010", None, False)


def test_exactly_one_target():
    check_target(None, "smollm2-135m-instruct", False)
    with pytest.raises(ValueError, match=r"got \['model', 'latest_checkpoint'\]"):
        check_target(None, "m", True)


def test_kind_of_source():
    assert kind_of("generated") == "swe-smith" and kind_of("SWE-bench/SWE-smith") == "swe-smith"
    assert kind_of("SWE-bench/SWE-bench_Verified") == "swe-bench-verified"
    assert kind_of("/data/verified.parquet") == "swe-bench-verified"


def test_store_for_a_checkpoint_uri(tmp_path, monkeypatch):
    config = load_run_config("swe-eval-local", recipe="swe")
    local = store_for_checkpoint(config, (tmp_path / "store" / "run" / "step-000001").as_uri())
    assert isinstance(local.store, LocalStore) and local.store.root == tmp_path / "store"
    for name in ("HARNESSRL_S3_ENDPOINT", "HARNESSRL_S3_ACCESS_KEY", "HARNESSRL_S3_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="HARNESSRL_S3_ACCESS_KEY"):
        store_for_checkpoint(config, "s3://harnessrl/checkpoints/run/step-000001")
