"""`make services` (deploy/services.py) without starting the servers: command lines, environments, the deployments it
picks from prefect.yaml, the two-interrupt stop of a child, a busy port and `stop` with nothing running.
tests/flows/test_deployment.py starts everything for real."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.deploy.services_module import services
from tests.deploy.support import REPO
from tests.flows.test_prefect_yaml import EXPECTED


@pytest.fixture()
def config(tmp_path):
    return services.ServicesConfig(state_dir=tmp_path / "state", prefect_port=14200, mlflow_port=15000,
                                   bin_dir=Path("/venv/bin"))


def test_local_deployments_are_those_of_the_process_pool_in_prefect_yaml():
    project = yaml.safe_load((REPO / "prefect.yaml").read_text())
    pools = dict.fromkeys(pool for pool, _, _ in EXPECTED.values())
    assert list(pools) == ["harnessrl-process", "harnessrl-kubernetes"]
    for pool in pools:
        on_pool = [f"{flow}/{name}" for (flow, name), (where, _, _) in EXPECTED.items() if where == pool]
        assert services.pool_deployments(project, pool) == on_pool, f"the deployments of {pool}, in file order"
    with pytest.raises(ValueError, match="'nope'"):
        services.pool_deployments(project, "nope")


def test_servers_listen_where_the_urls_point(config):
    assert config.prefect_api_url == "http://127.0.0.1:14200/api" and config.mlflow_url == "http://127.0.0.1:15000"
    assert services.prefect_server_command(config) == \
        ["/venv/bin/prefect", "server", "start", "--host", "127.0.0.1", "--port", "14200"]
    mlflow = services.mlflow_server_command(config)
    assert mlflow[:2] == ["/venv/bin/mlflow", "server"]
    options = dict(zip(mlflow[2::2], mlflow[3::2], strict=True))
    assert options == {"--backend-store-uri": f"sqlite:///{config.state_dir / 'mlflow' / 'mlflow.db'}",
                       "--artifacts-destination": str(config.state_dir / "mlflow" / "artifacts"),
                       "--host": "127.0.0.1", "--port": "15000", "--workers": "1"}


def test_pool_deploy_and_worker_commands(config):
    assert services.work_pool_command(config) == \
        ["/venv/bin/prefect", "work-pool", "create", "harnessrl-process", "--type", "process"]
    assert services.deploy_command(config, ["train-swe/default", "train-if/default"]) == \
        ["/venv/bin/prefect", "--no-prompt", "deploy", "--name", "train-swe/default", "--name", "train-if/default"]
    assert services.worker_command(config) == \
        ["/venv/bin/prefect", "worker", "start", "--pool", "harnessrl-process", "--type", "process"]


def test_worker_env_points_prefect_and_mlflow_at_the_servers_and_keeps_the_callers(config):
    caller = {"HARNESSRL_SWE_STORE": "/tmp/swe", "PREFECT_API_URL": "https://elsewhere/api", "PATH": "/bin"}
    env = services.worker_env(config, caller)
    assert env["PREFECT_API_URL"] == "http://127.0.0.1:14200/api", "the caller's Prefect API is replaced"
    assert env["PREFECT_HOME"] == str(config.state_dir / "prefect")
    assert env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:15000"
    assert env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert env["HARNESSRL_SWE_STORE"] == "/tmp/swe" and env["PATH"] == "/bin"
    assert "MLFLOW_TRACKING_URI" not in services.prefect_env(config, caller)


def test_cancel_requests_fit_the_prefect_server_schemas():
    from prefect.server.schemas.actions import StateCreate
    from prefect.server.schemas.filters import FlowRunFilter, WorkPoolFilter
    from prefect.server.schemas.states import StateType

    body = services.active_runs_filter("harnessrl-process")
    assert set(body) == {"flow_runs", "work_pools"}
    runs, pools = FlowRunFilter.model_validate(body["flow_runs"]), WorkPoolFilter.model_validate(body["work_pools"])
    assert set(runs.state.type.any_) == {StateType.PENDING, StateType.RUNNING, StateType.CANCELLING}
    assert pools.name.any_ == ["harnessrl-process"]
    assert StateCreate.model_validate(services.cancelling_state()["state"]).type == StateType.CANCELLING


IGNORES_FIRST_SIGINT = """
import signal, sys, time
seen = []
def handle(*_):
    seen.append(1)
    if len(seen) == 2:
        sys.exit(0)
signal.signal(signal.SIGINT, handle)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def spawn(tmp_path: Path, code: str):
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return services.Child("worker", proc, tmp_path / "worker.log")


def test_a_child_that_needs_two_interrupts_gets_two(tmp_path):
    child = spawn(tmp_path, IGNORES_FIRST_SIGINT)
    started = time.monotonic()
    child.stop((signal.SIGINT, signal.SIGINT), timeout_s=1.0)
    assert child.proc.returncode == 0, "it exits by itself on the second SIGINT, not by SIGKILL"
    assert 1.0 <= time.monotonic() - started < 5.0


def test_a_child_that_ignores_interrupts_is_killed(tmp_path):
    child = spawn(tmp_path, "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', "
                            "flush=True); time.sleep(60)")
    child.stop((signal.SIGINT,), timeout_s=0.5)
    assert child.proc.returncode == -signal.SIGKILL and not child.group_alive()


def test_start_refuses_a_busy_port_before_starting_anything(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = services.ServicesConfig(state_dir=tmp_path / "state", prefect_port=port, mlflow_port=port + 1)
        runner = services.Services(config)
        with pytest.raises(RuntimeError, match=f"port {port} .* in use"):
            runner.start()
    assert runner.children == [] and not config.state_dir.exists()


def test_stop_with_nothing_running_says_so(tmp_path, capsys):
    assert services.main(["stop", "--state-dir", str(tmp_path / "state")]) == 0
    assert "no services running" in capsys.readouterr().out
