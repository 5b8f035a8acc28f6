"""`make services`: a Prefect server, an MLflow server, the process work pool, the local deployments of prefect.yaml
and a process worker, in the foreground. Ctrl-C (or `make services-stop`) stops them all: flow runs in flight are
cancelled first (so a training run stops the engine, gateway and controller it started). Logs under `.services/`.

    python deploy/services.py start [--prefect-port 4200] [--mlflow-port 5000] [--state-dir .services]
    python deploy/services.py stop [--state-dir .services]

Then, in another terminal: `PREFECT_API_URL=http://127.0.0.1:4200/api prefect deployment run train-swe/default --watch`.
Flow runs log to the MLflow server (the worker's $MLFLOW_TRACKING_URI); the worker inherits this process's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PROJECT_DIR = Path(__file__).resolve().parents[1]
WORK_POOL = "harnessrl-process"
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}
"""No telemetry (Prefect's also locks its SQLite database), no litellm price-list fetch, no MLflow job runner."""


@dataclass(frozen=True)
class ServicesConfig:
    """Where the services listen and keep their state."""

    state_dir: Path = PROJECT_DIR / ".services"
    """Logs, the Prefect home (its SQLite database) and the MLflow store."""
    project_dir: Path = PROJECT_DIR
    """Where prefect.yaml is; `prefect deploy` runs here, so the deployments run this checkout."""
    host: str = "127.0.0.1"
    prefect_port: int = 4200
    mlflow_port: int = 5000
    work_pool: str = WORK_POOL
    bin_dir: Path = Path(sys.executable).parent
    """Where the `prefect` and `mlflow` executables are (this interpreter's environment)."""
    worker_query_s: float = 5.0
    """How often the worker asks for scheduled flow runs."""
    startup_timeout_s: float = 240.0
    """Longest wait for each server to become healthy (Prefect on a fresh database: about 35 s on 2 cores)."""
    stop_timeout_s: float = 20.0
    """Grace given to each stop signal before the next one."""
    cancel_timeout_s: float = 120.0
    """Longest wait for in-flight flow runs to finish cancelling (their engine, gateway and controller stop)."""

    @property
    def prefect_api_url(self) -> str:
        return f"http://{self.host}:{self.prefect_port}/api"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.host}:{self.mlflow_port}"

    @property
    def prefect_home(self) -> Path:
        return self.state_dir / "prefect"

    @property
    def mlflow_dir(self) -> Path:
        return self.state_dir / "mlflow"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def state_file(self) -> Path:
        """Written when everything is up: this process's pid and the URLs (`stop` reads it)."""
        return self.state_dir / "services.json"


def prefect_env(config: ServicesConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of every Prefect command: this project's Prefect home and server, no telemetry."""
    return {**environ, **QUIET_ENV, "PREFECT_HOME": str(config.prefect_home),
            "PREFECT_API_URL": config.prefect_api_url}


def worker_env(config: ServicesConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's (and its flow runs') environment: Prefect's, plus MLflow on the MLflow server."""
    return {**prefect_env(config, environ), "MLFLOW_TRACKING_URI": config.mlflow_url,
            "PREFECT_WORKER_QUERY_SECONDS": str(config.worker_query_s)}


def prefect_server_command(config: ServicesConfig) -> list[str]:
    return [str(config.bin_dir / "prefect"), "server", "start", "--host", config.host,
            "--port", str(config.prefect_port)]


def mlflow_server_command(config: ServicesConfig) -> list[str]:
    """SQLite backend, proxied artifacts: clients need only the tracking URI."""
    return [str(config.bin_dir / "mlflow"), "server",
            "--backend-store-uri", f"sqlite:///{config.mlflow_dir / 'mlflow.db'}",
            "--artifacts-destination", str(config.mlflow_dir / "artifacts"),
            "--host", config.host, "--port", str(config.mlflow_port), "--workers", "1"]


def work_pool_command(config: ServicesConfig) -> list[str]:
    return [str(config.bin_dir / "prefect"), "work-pool", "create", config.work_pool, "--type", "process"]


def deploy_command(config: ServicesConfig, names: list[str]) -> list[str]:
    """`prefect deploy` of the named deployments (`flow/deployment`), without prompts."""
    return [str(config.bin_dir / "prefect"), "--no-prompt", "deploy", *(arg for n in names for arg in ("--name", n))]


def worker_command(config: ServicesConfig) -> list[str]:
    return [str(config.bin_dir / "prefect"), "worker", "start", "--pool", config.work_pool, "--type", "process"]


def pool_deployments(prefect_yaml: Mapping, work_pool: str) -> list[str]:
    """`flow-name/deployment` of each deployment in prefect.yaml on `work_pool` (the flow name from the entrypoint)."""
    names = []
    for deployment in prefect_yaml.get("deployments") or []:
        if (deployment.get("work_pool") or {}).get("name") == work_pool:
            function = deployment["entrypoint"].rsplit(":", 1)[-1]
            names.append(f"{function.replace('_', '-')}/{deployment['name']}")
    if not names:
        raise ValueError(f"prefect.yaml has no deployment on work pool {work_pool!r}; add one or pass --work-pool")
    return names


ACTIVE_STATES = ("PENDING", "RUNNING", "CANCELLING")
"""Flow-run states with a process on the worker."""


def active_runs_filter(work_pool: str) -> dict:
    """Body of `POST /api/flow_runs/filter`: the runs of `work_pool` that have a process."""
    return {"flow_runs": {"state": {"type": {"any_": list(ACTIVE_STATES)}}},
            "work_pools": {"name": {"any_": [work_pool]}}}


def cancelling_state() -> dict:
    """Body of `POST /api/flow_runs/{id}/set_state` that cancels a run (what `prefect flow-run cancel` sends)."""
    return {"state": {"type": "CANCELLING", "name": "Cancelling"}}


def post_json(url: str, body: dict, timeout_s: float = 10.0):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read() or b"null")


def healthy(url: str) -> bool:
    """True when `url` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


@dataclass
class Child:
    """A long-running service process in its own session (Ctrl-C reaches only this script, which stops it)."""

    name: str
    proc: subprocess.Popen
    log_path: Path

    def group_alive(self) -> bool:
        self.proc.poll()  # reap the leader so its group can empty
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, signals: tuple[signal.Signals, ...], timeout_s: float) -> None:
        """Each signal in turn to the group, `timeout_s` apart, then SIGKILL to what is left."""
        for sig in signals:
            if not self.group_alive():
                break
            self.signal_group(sig)
            deadline = time.monotonic() + timeout_s
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        if self.group_alive():
            self.signal_group(signal.SIGKILL)
        self.proc.wait(timeout=timeout_s)

    def log_tail(self, chars: int = 3000) -> str:
        return f"--- {self.log_path} ---\n{self.log_path.read_text(errors='replace')[-chars:]}"


@dataclass
class Services:
    """The services of `make services`, started in order and stopped in reverse."""

    config: ServicesConfig
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    stopping: threading.Event = field(default_factory=threading.Event)
    forced: threading.Event = field(default_factory=threading.Event)
    """A second Ctrl-C: stop without waiting for flow runs to cancel."""
    children: list[Child] = field(default_factory=list)

    def request_stop(self, *_) -> None:
        """Signal handler: the first signal stops gracefully, the next ones skip the wait for flow runs."""
        if self.stopping.is_set():
            self.forced.set()
        self.stopping.set()

    def start(self) -> None:
        c = self.config
        for name, port in (("Prefect", c.prefect_port), ("MLflow", c.mlflow_port)):
            if port_in_use(c.host, port):
                raise RuntimeError(f"port {port} on {c.host} is in use; stop what holds it or pick another port "
                                   f"for {name} (make services PREFECT_PORT=... MLFLOW_PORT=...)")
        for path in (c.logs_dir, c.prefect_home, c.mlflow_dir):
            path.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        env = prefect_env(c, self.environ)
        prefect = self.spawn("prefect-server", prefect_server_command(c), env)
        mlflow = self.spawn("mlflow-server", mlflow_server_command(c), {**self.environ, **QUIET_ENV})
        self.wait_healthy(mlflow, c.mlflow_url + "/health", started)
        self.wait_healthy(prefect, c.prefect_api_url + "/health", started)
        self.run_once("work-pool", work_pool_command(c), env, ok_output="already exists")
        names = pool_deployments(yaml.safe_load((c.project_dir / "prefect.yaml").read_text()), c.work_pool)
        self.run_once("deploy", deploy_command(c, names), env)
        self.spawn("worker", worker_command(c), worker_env(c, self.environ))
        say(f"services up after {time.monotonic() - started:.1f} s; deployed: {', '.join(names)}")

    def spawn(self, name: str, cmd: list[str], env: Mapping[str, str]) -> Child:
        log_path = self.config.logs_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, env=dict(env), cwd=self.config.project_dir, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        child = Child(name, proc, log_path)
        self.children.append(child)
        return child

    def wait_healthy(self, child: Child, url: str, started: float) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            if child.proc.poll() is not None:
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode}\n{child.log_tail()}")
            if healthy(url):
                say(f"{child.name} healthy at {url} after {time.monotonic() - started:.1f} s")
                return
            time.sleep(0.25)
        if self.stopping.is_set():
            raise KeyboardInterrupt
        raise TimeoutError(f"{child.name} not healthy at {url} after {self.config.startup_timeout_s} s\n"
                           f"{child.log_tail()}")

    def run_once(self, name: str, cmd: list[str], env: Mapping[str, str], ok_output: str | None = None) -> None:
        """A command that must succeed (or fail only with `ok_output` in its output); output to its log."""
        started = time.monotonic()
        result = subprocess.run(cmd, env=dict(env), cwd=self.config.project_dir, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL)
        output = result.stdout + result.stderr
        (self.config.logs_dir / f"{name}.log").write_text(output)
        if self.stopping.is_set():
            raise KeyboardInterrupt
        if result.returncode != 0 and not (ok_output and ok_output in output):
            raise RuntimeError(f"{name} failed ({' '.join(cmd)} exited with {result.returncode}):\n{output[-3000:]}")
        say(f"{name} done in {time.monotonic() - started:.1f} s")

    def wait(self) -> None:
        """Until a stop is asked for, or a service exits (an error)."""
        while not self.stopping.wait(0.5):
            for child in self.children:
                if child.proc.poll() is not None:
                    raise RuntimeError(f"{child.name} exited with {child.proc.returncode}\n{child.log_tail()}")

    def stop(self) -> None:
        """In-flight flow runs cancelled, then the worker (it needs two interrupts), then the servers."""
        if any(child.name == "worker" and child.proc.poll() is None for child in self.children):
            self.cancel_flow_runs()
        for child in reversed(self.children):
            signals = (signal.SIGINT, signal.SIGINT) if child.name == "worker" else (signal.SIGTERM,)
            child.stop(signals, self.config.stop_timeout_s)
            say(f"{child.name} stopped")
        self.children.clear()

    def cancel_flow_runs(self) -> None:
        """Cancels the pool's running flow runs and waits for them to end: a stopped worker kills its flow-run
        processes outright, which leaves the services a training flow started running."""
        api = self.config.prefect_api_url
        try:
            runs = post_json(f"{api}/flow_runs/filter", active_runs_filter(self.config.work_pool))
            for run in runs:
                post_json(f"{api}/flow_runs/{run['id']}/set_state", cancelling_state())
        except (urllib.error.URLError, OSError, ValueError) as error:
            say(f"could not cancel the flow runs in flight ({error}); stopping the worker kills them")
            return
        if not runs:
            return
        say(f"cancelling {len(runs)} flow run(s): {', '.join(run['name'] for run in runs)} (Ctrl-C again: don't wait)")
        deadline = time.monotonic() + self.config.cancel_timeout_s
        while runs and time.monotonic() < deadline and not self.forced.wait(1.0):
            with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
                runs = post_json(f"{api}/flow_runs/filter", active_runs_filter(self.config.work_pool))
        say("flow runs cancelled" if not runs else f"flow runs still active: {', '.join(r['name'] for r in runs)}")


def say(message: str) -> None:
    print(f"[services] {message}", flush=True)


def start(config: ServicesConfig) -> int:
    """`start`: up, ready file, wait for Ctrl-C / SIGTERM, down. Exit status 0 after a requested stop."""
    running = read_state(config)
    if running is not None and pid_alive(running["pid"]):
        say(f"already running (pid {running['pid']}, {config.state_file}); stop them first: make services-stop")
        return 1
    services = Services(config)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, services.request_stop)
    status = 0
    try:
        services.start()
        config.state_file.write_text(json.dumps({"pid": os.getpid(), "prefect_api_url": config.prefect_api_url,
                                                 "mlflow_url": config.mlflow_url, "work_pool": config.work_pool}))
        say(f"Prefect UI {config.prefect_api_url.removesuffix('/api')}, MLflow UI {config.mlflow_url}, "
            f"logs in {config.logs_dir}")
        say(f"run a deployment: PREFECT_API_URL={config.prefect_api_url} "
            f"{config.bin_dir / 'prefect'} deployment run train-swe/default --watch")
        say("Ctrl-C (or make services-stop) stops everything")
        services.wait()
    except KeyboardInterrupt:
        pass
    except (RuntimeError, TimeoutError, ValueError) as error:
        say(f"error: {error}")
        status = 1
    finally:
        say("stopping")
        services.stop()
        config.state_file.unlink(missing_ok=True)
    return status


def read_state(config: ServicesConfig) -> dict | None:
    try:
        return json.loads(config.state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(config: ServicesConfig, timeout_s: float = 300.0) -> int:
    """`stop`: SIGTERM to the running `start`, then wait for it to have stopped everything."""
    state = read_state(config)
    if state is None or not pid_alive(state["pid"]):
        say(f"no services running ({config.state_file} names no live process)")
        return 0
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(state["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(state["pid"]):
        say(f"pid {state['pid']} still running after {timeout_s} s; see {config.logs_dir}")
        return 1
    say("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--state-dir", type=Path, default=ServicesConfig.state_dir)
    parser.add_argument("--prefect-port", type=int, default=ServicesConfig.prefect_port)
    parser.add_argument("--mlflow-port", type=int, default=ServicesConfig.mlflow_port)
    parser.add_argument("--work-pool", default=ServicesConfig.work_pool)
    args = parser.parse_args(argv)
    config = ServicesConfig(state_dir=args.state_dir.resolve(), prefect_port=args.prefect_port,
                            mlflow_port=args.mlflow_port, work_pool=args.work_pool)
    return start(config) if args.action == "start" else stop(config)


if __name__ == "__main__":
    sys.exit(main())
