"""The training flow against services that already run: an engine, a gateway and a controller started outside it.

`engine.url`, `gateway.url` and `controller.start: false` make the flow start nothing: it loads its start weights into
the running engine (which still serves another run's policy, version 7), registers its model with the running gateway
under the name the engine serves, lets the running controller execute the rollouts, and leaves all three running.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from gateway.client import GatewayAPIError, GatewayClient
from tests.flows.train_support import mlflow_run, overrides
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN, GatewayProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture
def running_engine(tiny_model_dir):
    from engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine(tiny_model_dir, port=free_port(), served_model_name="someone-elses-policy",
                            max_batch_size=16)
    engine.start()
    engine.update_weights(tiny_model_dir, 7)  # as if another run had trained it to version 7
    yield engine
    engine.stop()


@pytest.fixture
def running_gateway(tmp_path):
    gateway = GatewayProcess(tmp_path / "gateway.db").start()
    yield gateway
    gateway.stop()


@pytest.fixture
def running_controller(tmp_path, running_gateway):
    env = {**os.environ, "HARNESSRL_ADMIN_TOKEN": ADMIN_TOKEN, "HARNESSRL_GRADER_TOKEN": GRADER_TOKEN}
    command = [sys.executable, "-m", "controller.cli", "run", "--gateway", running_gateway.url,
               "--recipe", "instruction_following", "--concurrency", "6", "--work-dir", str(tmp_path / "work"),
               "--logs-dir", str(tmp_path / "harness-logs")]
    process = subprocess.Popen(command, env=env)
    yield process
    process.terminate()
    process.wait(timeout=30)


def test_train_if_connects_to_running_engine_gateway_and_controller(prefect_api, tiny_model_dir, tmp_path,
                                                                     running_engine, running_gateway,
                                                                     running_controller, monkeypatch):
    from flows.named_flows import train_if

    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", ADMIN_TOKEN)
    connect = {"engine.url": running_engine.base_url, "gateway.url": running_gateway.url, "controller.start": False,
               "rollout.schedule": "sync", "name": "tiny-if-connected"}
    summary = train_if("if-local", overrides(tmp_path, tiny_model_dir, **connect))

    assert summary["iterations"] == 2
    health = running_engine.health()
    assert health["status"] == "ok", "the flow leaves an engine it did not start running"
    assert health["policy_version"] == summary["updates"], "the run's weights (version 0 + its updates), not 7"
    with GatewayClient(running_gateway.url, ADMIN_TOKEN) as admin:
        (model,) = [m for m in admin.list_models() if m.name == "policy"]
        assert model.served_name == "someone-elses-policy" and model.version == summary["updates"]
        rollout = admin.get_rollout("tiny-if-connected-train-0-0")
        calls = admin.calls(rollout.id)
        assert rollout.state in ("succeeded", "failed") and calls
        assert {call.policy_version for call in calls} == {0}, "the first batch ran on the run's version-0 weights"
        with pytest.raises(GatewayAPIError, match="does not exist"):
            admin.get_rollout("tiny-if-connected-train-4-0")  # sync: 2 iterations x 2 groups, nothing more created
    assert httpx.get(running_gateway.url + "/health").status_code == 200
    assert running_controller.poll() is None, "the flow does not stop a controller it did not start"
    client, run = mlflow_run(tmp_path, summary["mlflow_run_id"])
    assert run.data.params["engine.url"] == running_engine.base_url
    assert client.get_metric_history(run.info.run_id, "rollout/rollouts")[-1].value == 8.0
