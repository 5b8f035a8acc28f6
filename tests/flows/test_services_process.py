"""RunProcesses against real processes: a dead gateway is reported, stop() ends the controller's whole process group.

The engine is the session's running one (engine.url), so only the gateway and, where a test asks, a controller start.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from flows.config import EngineSection
from flows.run_processes import ProcessSettings, RunProcesses
from gateway.client import GatewayAPIError
from tests.services import process_gone, wait_for_file

pytestmark = pytest.mark.slow


def settings(run_dir: Path, model_dir: Path, engine_url: str, start_controller: bool) -> ProcessSettings:
    return ProcessSettings(run_dir=run_dir, model_path=model_dir, policy_version=0, model_name="policy",
                           engine=EngineSection(url=engine_url), start_controller=start_controller)


def test_check_alive_names_the_gateway_when_its_process_dies(tmp_path, tiny_model_dir, engine_url):
    with RunProcesses(settings(tmp_path, tiny_model_dir, engine_url, start_controller=False)) as services:
        services.check_alive()
        gateway = services._gateway._process  # the gateway process this run started, killed as by the OOM killer
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(timeout=10)
        with pytest.raises(RuntimeError, match=r"the gateway this run started exited with code -9.*gateway\.log"):
            services.check_alive()


def test_stop_ends_the_processes_the_controller_started(tmp_path, tiny_model_dir, engine_url, monkeypatch):
    pid_file = tmp_path / "harness.pid"
    # A controller that runs a harness in its process group and waits for it, as controller.cli run does.
    monkeypatch.setattr(RunProcesses, "controller_command",
                        lambda self: ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"])
    with RunProcesses(settings(tmp_path, tiny_model_dir, engine_url, start_controller=True)) as services:
        harness = int(wait_for_file(pid_file))
        services.check_alive()
    try:
        assert process_gone(harness), "the controller's harness process outlived RunProcesses.stop()"
    finally:
        if not process_gone(harness):
            os.kill(harness, signal.SIGKILL)


def test_a_resumed_run_leaves_only_its_new_engine_registered(tmp_path, tiny_model_dir, engine_url):
    """The gateway's store outlives the run's processes: the second start (a resume, on the same run directory) finds
    the endpoints an earlier process registered, and keeps only its own engine (a dead one left in would take part
    of the calls and fail them with 502s)."""
    dead = "http://127.0.0.1:9/v1"
    with RunProcesses(settings(tmp_path, tiny_model_dir, engine_url, start_controller=False)) as first:
        first.admin.register_model("policy", dead, version=0, served_name="policy")
        assert {m.base_url for m in first.admin.list_models()} == {dead, f"{engine_url}/v1"}
    with RunProcesses(settings(tmp_path, tiny_model_dir, engine_url, start_controller=False)) as resumed:
        assert [m.base_url for m in resumed.admin.list_models()] == [f"{engine_url}/v1"]
        with pytest.raises(GatewayAPIError, match="404"):
            resumed.admin.delete_model("policy", base_url=dead)
