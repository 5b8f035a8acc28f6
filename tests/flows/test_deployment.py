"""`make services` for real: deploy/services.py starts a Prefect server and an MLflow server on free ports, deploys
prefect.yaml's local deployments and starts a process worker; `prefect deployment run train-swe/default --watch` then
runs a tiny SWE training run to Completed, which logs to the MLflow server. A second, long run is in flight when
Ctrl-C stops everything: it is cancelled first, so the gateway and controller it started stop with it.

The SWE tasks come from the tiny local project of tests/recipes/swe (HARNESSRL_SWE_SOURCE, inherited by the worker)
rather than the recipe's default `pypi:xmltodict`: the same generation and grading path without the package index
and with a 5-test project to run per bug candidate and per grade (the sdist path is tested in
tests/recipes/swe/test_generator.py). The worker looks for scheduled runs every second (PREFECT_WORKER_QUERY_SECONDS;
default 10 s), so neither deployment run waits up to 10 s to be picked up.

Measured on 2 cores: services up in about 40 s, the tiny run about 65 s, the stop about 4 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.gateway.support import free_port
from tests.recipes.swe.conftest import write_tiny_project

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUN_NAME = "deploy-tiny-swe"
EXPERIMENT = "deployment-test"


def overrides(tmp_path: Path, tiny_model_dir: Path, name: str = RUN_NAME, **extra) -> dict:
    """One iteration of one group of two short SWE rollouts on the tiny model; everything written under tmp_path."""
    return {
        "name": name, "work_dir": str(tmp_path / name),
        "engine.model": str(tiny_model_dir), "engine.max_batch_size": 4,
        "data.train_tasks": 2, "data.val_tasks": 0,
        "rollout.group_size": 2, "rollout.batch_groups": 1, "rollout.max_inflight_groups": 1,
        "rollout.task_overrides": {"step_limit": 2, "max_tokens": 16, "command_timeout_s": 20},
        "rollout.wait_timeout_s": 300, "controller.concurrency": 2, "algorithm.iterations": 1,
        "tracking.experiment": EXPERIMENT,
        "checkpoints.store": f"file://{tmp_path / 'store'}", "checkpoints.keep_local": 1,
        **extra,
    }


def wait_ready(state_file: Path, proc: subprocess.Popen, log_path: Path, timeout_s: float) -> dict:
    """The services' state file, written once everything is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"services exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        if state_file.exists():
            return json.loads(state_file.read_text())
        time.sleep(0.5)
    pytest.fail(f"services not up after {timeout_s} s:\n{log_path.read_text()[-4000:]}")


def run_deployment(api_url: str, home: Path, parameters: dict, *watch: str) -> tuple[subprocess.CompletedProcess, str]:
    """`prefect deployment run train-swe/default`, as the services' hint says (only PREFECT_API_URL set)."""
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    result = subprocess.run([str(BIN / "prefect"), "deployment", "run", "train-swe/default", "--params",
                             json.dumps(parameters), *watch], env=env, capture_output=True, text=True, timeout=450)
    return result, result.stdout + result.stderr


def live_processes(marker: str) -> list[str]:
    """Processes (not zombies) whose command line mentions `marker`."""
    found = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{proc_dir.name}: {cmdline[:300]}")
    return found


def outliving(marker: str, within_s: float) -> list[str]:
    """The processes of `marker` still alive `within_s` after the services stopped (a flow run killed after its
    cancellation grace period leaves its gateway and controller a SIGTERM from the kernel, which takes a moment)."""
    deadline = time.monotonic() + within_s
    while (alive := live_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def start_long_run(api_url: str, tmp_path: Path, tiny_model_dir: Path, log_path: Path) -> str:
    """A run that would take many minutes, once its controller is up; returns the marker of its processes."""
    name = "deploy-tiny-swe-long"
    result, output = run_deployment(api_url, tmp_path / "cli-home",
                                    {"overrides": overrides(tmp_path, tiny_model_dir, name, **{
                                        "algorithm.iterations": 50, "tracking.experiment": f"{EXPERIMENT}-long"})})
    assert result.returncode == 0, output[-4000:]
    marker, deadline = str(tmp_path / name), time.monotonic() + 180
    while not any("controller.cli" in p for p in live_processes(marker)):
        assert time.monotonic() < deadline, f"the long run's controller never started\n{log_path.read_text()}"
        time.sleep(1)
    return marker


def test_services_run_train_swe_default_to_completion_and_log_to_mlflow(tiny_model_dir, tmp_path):
    state_dir, log_path = tmp_path / "services", tmp_path / "services.out"
    env = {**os.environ, "HARNESSRL_SWE_STORE": str(tmp_path / "swe-store"),  # the worker inherits these
           "HARNESSRL_SWE_SOURCE": str(write_tiny_project(tmp_path / "src" / "tinymath")),
           "PREFECT_WORKER_QUERY_SECONDS": "1"}
    cmd = [sys.executable, str(ROOT / "deploy" / "services.py"), "start", "--state-dir", str(state_dir),
           "--prefect-port", str(free_port()), "--mlflow-port", str(free_port())]
    started = time.monotonic()
    with open(log_path, "w") as log:  # not the project root: the script finds the project itself
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        state = wait_ready(state_dir / "services.json", proc, log_path, timeout_s=300)
        up_s = time.monotonic() - started
        result, output = run_deployment(state["prefect_api_url"], tmp_path / "cli-home",
                                        {"overrides": overrides(tmp_path, tiny_model_dir)},
                                        "--watch", "--watch-timeout", "400")
        run_s = time.monotonic() - started - up_s
        worker_log = (state_dir / "logs" / "worker.log").read_text()[-4000:]
        assert result.returncode == 0, f"{output[-4000:]}\n--- worker ---\n{worker_log}"
        assert "Flow run finished successfully in 'Completed'" in output
        check_flow_run(state["prefect_api_url"], re.search(r"UUID: ([0-9a-f-]{36})", output).group(1))
        check_mlflow_run(state["mlflow_url"], state_dir, tiny_model_dir)
        marker = start_long_run(state["prefect_api_url"], tmp_path, tiny_model_dir, log_path)
    finally:
        stopping = time.monotonic()
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=300)
    print(f"services up {up_s:.1f} s, deployment run {run_s:.1f} s, stop {time.monotonic() - stopping:.1f} s")
    out = log_path.read_text()
    assert proc.returncode == 0, out[-4000:]
    assert "cancelling 1 flow run(s)" in out and "flow runs cancelled" in out, out[-4000:]
    assert not outliving(marker, within_s=15.0), "the cancelled run's gateway and controller stopped"
    assert not (state_dir / "services.json").exists()
    assert "worker stopped" in out and "prefect-server stopped" in out and "mlflow-server stopped" in out


def check_flow_run(api_url: str, flow_run_id: str) -> None:
    """The flow run is of the train-swe/default deployment and Completed, as the server records it."""
    deployment = httpx.get(f"{api_url}/deployments/name/train-swe/default", timeout=10).raise_for_status().json()
    flow_run = httpx.get(f"{api_url}/flow_runs/{flow_run_id}", timeout=10).raise_for_status().json()
    assert flow_run["deployment_id"] == deployment["id"]
    assert flow_run["state"]["type"] == "COMPLETED", flow_run["state"]
    assert deployment["pull_steps"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}]


def check_mlflow_run(mlflow_url: str, state_dir: Path, tiny_model_dir: Path) -> None:
    """The run logged to the MLflow server (the worker's tracking URI), its artifacts in the server's store."""
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None, f"no experiment {EXPERIMENT!r} on {mlflow_url}"
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == RUN_NAME and run.info.status == "FINISHED"
    assert run.data.tags["recipe"] == "swe" and run.data.params["engine.model"] == str(tiny_model_dir)
    assert run.data.metrics["rollout/rollouts"] == 2.0 and run.data.metrics["train/iteration"] == 1.0
    assert {"config.json", "data"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    stored = state_dir / "mlflow" / "artifacts" / experiment.experiment_id / run.info.run_id / "artifacts"
    assert (stored / "config.json").is_file(), "artifacts go through the server into its artifact store"
