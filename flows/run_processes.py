"""The services a training run needs, started as local processes or reached where they already run.

`RunProcesses` brings up, in order: the inference engine (embedded or vLLM; or a URL of a running one, which is then
loaded with the run's start weights and policy version), the gateway (a `gateway.cli serve` process on a free port
with a SQLite store in the run directory, or a URL), the policy model registered with the gateway under the run's
model name, and a rollout controller process (`controller.cli run`) unless one already serves that gateway.
`stop()` ends what it started, in reverse order; services it connected to keep running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from engines.base import Engine
from engines.server_process import (
    ServerProcess,
    dies_with_parent,
    free_port,
    stop_process_group,
    with_repo_on_path,
)
from flows.config import EngineSection
from gateway.client import GatewayClient
from gateway.config import policy_routing
from gateway.sampling import SamplingPolicy

log = logging.getLogger(__name__)

CONTROLLER_STOP_GRACE_S = 30.0
"""How long the controller and its harness processes get to exit on SIGTERM before they are killed."""
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class ProcessSettings:
    """What to start and where."""

    run_dir: Path
    """Holds the gateway database, the controller's working directories and all service logs."""
    model_path: Path
    """HF model directory the engine serves (the base policy or a resumed checkpoint)."""
    policy_version: int
    """Version of those weights."""
    model_name: str
    """Model name harnesses ask for (registered with the gateway)."""
    engine: EngineSection = field(default_factory=EngineSection)
    """The run's engine section: kind, a running engine's URL, the embedded and vLLM options."""
    gateway_url: str | None = None
    """A running gateway (admin token from $HARNESSRL_ADMIN_TOKEN); none: start one."""
    start_controller: bool = True
    """Start a controller process against the gateway."""
    controller_args: tuple[str, ...] = ()
    """Extra `controller run` options (runner, concurrency, timeouts)."""
    sampling: SamplingPolicy = field(default_factory=SamplingPolicy)
    """The started gateway's sampling policy for train calls (enforced or recorded)."""
    recorded_turns: bool = False
    """The started gateway gives the engine the recorded tokens of re-sent turns (gateway config `recorded_turns`)."""


def gateway_settings(settings: ProcessSettings) -> dict[str, Any]:
    """The config of the gateway a run starts: harness model names sent to the policy, side calls marked, the run's
    sampling policy for train calls, recorded turns when the recipe's harness re-serialises its history."""
    recorded = {"recorded_turns": True} if settings.recorded_turns else {}
    return {**policy_routing(settings.model_name), "sampling": settings.sampling.model_dump(mode="json"), **recorded}


def engine_host_port(url: str) -> tuple[str, int]:
    """Host and port of a running engine's root URL (`http://host:port`), as the engine classes take them."""
    parsed = urlsplit(url)
    if not parsed.hostname or parsed.port is None:
        raise ValueError(f"engine.url={url!r} needs a host and a port, e.g. http://127.0.0.1:8000")
    return parsed.hostname, parsed.port


class RunProcesses:
    """Engine + gateway + controller for one run (a context manager)."""

    def __init__(self, settings: ProcessSettings) -> None:
        if settings.gateway_url and not os.environ.get("HARNESSRL_ADMIN_TOKEN"):
            raise ValueError(f"gateway.url={settings.gateway_url!r} is a running gateway: set $HARNESSRL_ADMIN_TOKEN "
                             "to its admin token (the one it was started with), or leave gateway.url empty to start "
                             "one")
        self.settings = settings
        self.logs_dir = settings.run_dir / "logs"
        self.admin_token = os.environ.get("HARNESSRL_ADMIN_TOKEN") or secrets.token_urlsafe(24)
        self.grader_token = os.environ.get("HARNESSRL_GRADER_TOKEN") or secrets.token_urlsafe(24)
        self.engine: Engine | None = None
        self.gateway_url = settings.gateway_url or ""
        self.admin: GatewayClient | None = None
        self._stops = contextlib.ExitStack()  # what this object started, stopped in reverse order
        self._gateway: ServerProcess | None = None
        self._controller: subprocess.Popen | None = None

    def __enter__(self) -> RunProcesses:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Starts (or connects to) every service and registers the model."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.engine = self._engine()
        served_name = self.settings.model_name
        if self.settings.engine.url is None:
            self.engine.start()
            self._stops.callback(self.engine.stop)
        else:
            served_name = self._align_running_engine()
        if not self.gateway_url:
            self._start_gateway()
        self.admin = self._stops.enter_context(GatewayClient(self.gateway_url, self.admin_token))
        self._register_engine(served_name)
        if self.settings.start_controller:
            self._start_controller()

    def _register_engine(self, served_name: str) -> None:
        """The run's engine becomes its model's only endpoint in the gateway. Other endpoints of the model are what
        an earlier process of this run left in the gateway's store (a resume finds its dead engine there): left in,
        the gateway would spread calls over them and rollouts would fail with 502s."""
        assert self.admin is not None and self.engine is not None
        name, url = self.settings.model_name, self.engine.base_url + "/v1"
        for stale in sorted({m.base_url for m in self.admin.list_models() if m.name == name and m.base_url != url}):
            self.admin.delete_model(name, base_url=stale)
            log.info("removed the stale endpoint %s of model %s from the gateway", stale, name)
        self.admin.register_model(name, url, version=self.settings.policy_version, served_name=served_name)

    def _engine(self) -> Engine:
        s, e = self.settings, self.settings.engine
        host, port = engine_host_port(e.url) if e.url is not None else ("127.0.0.1", 0)
        if e.kind == "vllm":
            from engines.vllm import VLLMConfig, VLLMEngine

            config = VLLMConfig(**e.vllm.model_dump(), model=str(s.model_path), served_model_name=s.model_name,
                                host=host, port=port)
            return VLLMEngine(config, log_path=self.logs_dir / "engine.log")
        from engines.embedded import EmbeddedEngine

        return EmbeddedEngine(s.model_path, host=host, port=port, served_model_name=s.model_name,
                              max_batch_size=e.max_batch_size, startup_timeout_s=e.startup_timeout_s,
                              log_path=self.logs_dir / "engine.log", num_threads=e.num_threads,
                              prefix_cache_tokens=e.prefix_cache_tokens, dtype=e.dtype)

    def _align_running_engine(self) -> str:
        """Loads the run's start weights and version into an engine this run did not start (it may serve another
        run's policy, or the base model while this run resumes); returns the name it serves its model under."""
        assert self.engine is not None
        url = self.engine.base_url + "/v1/models"
        try:
            response = httpx.get(url, timeout=30.0)
            response.raise_for_status()
            served = response.json()["data"][0]["id"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise RuntimeError(f"engine.url={self.settings.engine.url!r}: no OpenAI model list at {url} ({exc}); "
                               "start the engine first or leave engine.url empty to start one") from exc
        self.engine.update_weights(self.settings.model_path, self.settings.policy_version)
        return served

    def _env(self) -> dict[str, str]:
        return with_repo_on_path(dict(os.environ, HARNESSRL_ADMIN_TOKEN=self.admin_token,
                                      HARNESSRL_GRADER_TOKEN=self.grader_token))

    def _start_gateway(self) -> None:
        port = free_port()
        self.gateway_url = f"http://127.0.0.1:{port}"
        self._gateway = ServerProcess("gateway", self.gateway_url, self.logs_dir / "gateway.log")
        db = self.settings.run_dir / "gateway.db"
        config = self.settings.run_dir / "gateway.yaml"  # harness model names -> the policy, side calls marked
        config.write_text(yaml.safe_dump(gateway_settings(self.settings), sort_keys=False))
        command = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--db", f"sqlite:///{db}",
                   "--config", str(config)]
        self._stops.callback(self._gateway.stop)
        self._gateway.start(command, self._env(), startup_timeout_s=60.0)

    def controller_command(self) -> list[str]:
        """The rollout controller's command line."""
        return [sys.executable, "-m", "controller.cli", "run", "--gateway", self.gateway_url,
                "--work-dir", str(self.settings.run_dir / "work"),
                "--logs-dir", str(self.settings.run_dir / "harness-logs"), *self.settings.controller_args]

    def _start_controller(self) -> None:
        log = (self.logs_dir / "controller.log").open("ab")
        # Its own process group, which stop() ends whole (its harnesses' sandboxes die with it); SIGTERM also when
        # this process dies without stopping it (a flow run killed after its cancellation grace period).
        self._controller = subprocess.Popen(dies_with_parent(self.controller_command()), stdout=log,
                                            stderr=subprocess.STDOUT, env=self._env(), start_new_session=True)
        self._stops.callback(stop_process_group, self._controller, CONTROLLER_STOP_GRACE_S)
        log.close()

    def check_alive(self) -> None:
        """Raises naming the service and quoting its log when a process this run started has exited."""
        if self._controller is not None and self._controller.poll() is not None:
            log_path = self.logs_dir / "controller.log"
            tail = log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            raise RuntimeError(exited_message("controller", self._controller.returncode, log_path, tail))
        if self._gateway is not None and (code := self._gateway.exit_code()) is not None:
            raise RuntimeError(exited_message("gateway", code, self._gateway.log_path,
                                              self._gateway.log_tail(LOG_TAIL_CHARS)))

    def stop(self) -> None:
        """Stops what this object started, last started first: the controller (its whole process group), the admin
        client, the gateway, the engine; each is stopped even when stopping another failed."""
        self._stops.close()


def exited_message(service: str, exit_code: int, log_path: Path, log_tail: str) -> str:
    """The error for a service process of this run that has exited."""
    return (f"the {service} this run started exited with code {exit_code}; the run cannot continue without it "
            f"(read {log_path} for the cause, then restart the run); the log ends with:\n{log_tail}")
