"""The SWE harness: the real mini-swe-agent (text-based actions) on the task's repository copy, every command sandboxed.

A plain program: `python -m recipes.swe.harness`, run in the rollout's working directory, which holds `task.json` and
`repo/` (the buggy repository copy, no .git). It talks to OPENAI_BASE_URL with OPENAI_API_KEY through the model
class its configuration names (`model.model_class`): litellm's `openai/<model>` by default, the same request over
plain HTTP in `one_command` (http_model.py). Under the local runner it runs inside the runner's sandbox (its only way
out is its rollout's gateway path); each command of the agent runs in a sandbox of its own inside that one, with no
network at all and only `repo/` writable (see sandbox.py). The harness makes itself non-dumpable so that nothing
running as its uid can read its memory or environment.
Task fields: "problem_statement", "store" (hidden from the agent's commands); optional "model" (default "policy"),
"step_limit" (default 30), "max_tokens" (default 1024), "temperature" (default 1.0), "command_timeout_s" (default 60),
"harness_config" (default "mini_textbased", mini-swe-agent's own; "one_command" for small models: harness_configs.py).
It writes the trajectory to `trajectory.json` next to `repo/`, for humans only: the grader computes the diff itself.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipes.swe.harness_configs import DEFAULT_CONFIG, load_harness_config, workdir_config
from recipes.swe.sandbox import ALLOW_NETWORK_ENV, SANDBOX_MODE_ENV, ContainerCommands, Sandbox

REPO_DIR = "repo"
TRAJECTORY_FILE = "trajectory.json"
DEFAULT_MODEL_CLASS = "litellm_textbased"  # mini-swe-agent's, for a configuration that names none
HTTP_MODEL_CLASS = "http_textbased"  # the project's (http_model.py): litellm's request without litellm
DEFAULTS = {"model": "policy", "step_limit": 30, "max_tokens": 1024, "temperature": 1.0, "command_timeout_s": 60,
            "harness_config": DEFAULT_CONFIG}


def load_task() -> dict[str, Any]:
    """The task JSON named by $HARNESSRL_TASK (default ./task.json), with defaults filled in."""
    return DEFAULTS | json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())


def textbased_config() -> dict[str, Any]:
    """mini-swe-agent's own `mini_textbased.yaml` (fenced `mswea_bash_command` actions)."""
    return load_harness_config(DEFAULT_CONFIG)


def build_model(task: dict[str, Any], config: dict[str, Any]):
    """The configuration's text-based model pointed at the gateway (the rollout's URL and key, no price lookups):
    `model.model_class` (`project_model_class`), litellm's by default."""
    kwargs = {"api_base": os.environ["OPENAI_BASE_URL"], "api_key": os.environ["OPENAI_API_KEY"],
              "max_tokens": task["max_tokens"], "temperature": task["temperature"], "drop_params": True}
    model_config = {k: v for k, v in config["model"].items() if k not in ("model_kwargs", "model_class")}
    model_class = project_model_class(config["model"].get("model_class") or DEFAULT_MODEL_CLASS)
    return model_class(model_name=f"openai/{task['model']}", model_kwargs=kwargs, cost_tracking="ignore_errors",
                       **model_config)


def project_model_class(name: str) -> type:
    """`name` as a model class, from an allow-list: the project's HTTP model (imported here, so that the runner's
    sandbox, which binds the harness's static imports, holds its file) or litellm's text-based model with the
    rollout's key kept out of its template variables and its trajectory file (litellm's own writes it there, where an
    agent command in a container sandbox could read it)."""
    if name == HTTP_MODEL_CLASS:
        from recipes.swe.http_model import HttpTextbasedModel

        return HttpTextbasedModel
    if name == DEFAULT_MODEL_CLASS:
        from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

        return keyless(LitellmTextbasedModel)
    raise ValueError(f"model.model_class={name!r} is not a model class of the SWE harness; use "
                     f"{HTTP_MODEL_CLASS!r} or {DEFAULT_MODEL_CLASS!r}")


def keyless(model_class: type) -> type:
    """`model_class` whose template variables and serialisation (the trajectory file) hold no `api_key`."""

    from recipes.swe.http_model import without_api_keys

    class Keyless(model_class):
        def get_template_vars(self, **kwargs) -> dict[str, Any]:
            return without_api_keys(super().get_template_vars(**kwargs))

        def serialize(self) -> dict:
            return without_api_keys(super().serialize())

    Keyless.__name__, Keyless.__qualname__, Keyless.__module__ = (model_class.__name__, model_class.__qualname__,
                                                                  model_class.__module__)
    return Keyless


def build_environment(sandbox: Sandbox | ContainerCommands, timeout_s: int):
    """mini-swe-agent's local environment, with every command run through the sandbox."""
    return sandboxed_environment(lambda command, _cwd, limit_s: sandbox.run(command, limit_s), str(sandbox.cwd),
                                 timeout_s)


def sandboxed_environment(run: Callable[[str, str, int], Any], cwd: str, timeout_s: int):
    """mini-swe-agent's environment (LocalEnvironment's interface and submit rule) whose commands go through
    `run(command, cwd, timeout_s)` (a result with output, returncode and timed_out). Its template variables leave
    out this process's environment: the rollout's API key lives there."""
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.utils.serialize import recursive_merge

    class SandboxedEnvironment(LocalEnvironment):
        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            limit = timeout or self.config.timeout
            result = run(action.get("command", ""), cwd or self.config.cwd, limit)
            info = f"The command timed out after {limit} s and was killed." if result.timed_out else ""
            output = {"output": result.output, "returncode": result.returncode, "exception_info": info}
            self._check_finished(output)
            return output

        def get_template_vars(self, **kwargs) -> dict[str, Any]:
            return recursive_merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)

    return SandboxedEnvironment(cwd=cwd, timeout=timeout_s)


def make_undumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): this process's /proc files (environ with the rollout key, memory) become root's."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)


def command_runner(task: dict[str, Any], workdir: Path, shim_dir: Path) -> Sandbox | ContainerCommands:
    """Where the agent's commands run: a sandbox each, or (SANDBOX_MODE_ENV=container) the pod that is the sandbox."""
    if os.environ.get(SANDBOX_MODE_ENV) == "container":
        return ContainerCommands(cwd=workdir / REPO_DIR, shim_dir=shim_dir)
    return Sandbox(cwd=workdir / REPO_DIR, shim_dir=shim_dir, hidden=(Path(task["store"]),),
                   allow_network=os.environ.get(ALLOW_NETWORK_ENV) == "1")


def run_agent(task: dict[str, Any], workdir: Path, shim_dir: Path) -> dict[str, Any]:
    """Run mini-swe-agent to its end (submitted, step limit, format errors); returns its exit info."""
    from minisweagent.agents.default import DefaultAgent

    config = workdir_config(task["harness_config"], workdir)
    if workdir.resolve().is_relative_to(Path(task["store"]).resolve()):
        raise ValueError(f"working directory {workdir} is inside the task store {task['store']}, which the sandbox "
                         f"hides from the agent; run rollouts in a directory outside the store")
    sandbox = command_runner(task, workdir, shim_dir)
    agent_config = config["agent"] | {"step_limit": task["step_limit"], "cost_limit": 0,
                                      "output_path": workdir / TRAJECTORY_FILE}
    agent = DefaultAgent(build_model(task, config), build_environment(sandbox, task["command_timeout_s"]),
                         **agent_config)
    return agent.run(task["problem_statement"])


def main() -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price list
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    task = load_task()
    workdir = Path.cwd()
    if not (workdir / REPO_DIR).is_dir():
        print(f"no {REPO_DIR}/ in {workdir}: the recipe's prepare_workdir lays it out", file=sys.stderr)
        return 2
    make_undumpable()
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-") as scratch:  # the commands' scratch: only the shim
        info = run_agent(task, workdir, Path(scratch) / "shim")
    print(json.dumps({"exit_status": info.get("exit_status"), "submission_chars": len(info.get("submission") or "")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
