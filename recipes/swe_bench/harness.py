"""The SWE-bench harness: the real mini-swe-agent (text-based actions, litellm to the gateway) whose every command runs
in the `sandbox` container (the official instance image, repository at /testbed) through `sandbox_client`.

A plain program: `python -m recipes.swe_bench.harness`, run in the rollout's working directory (task.json) in a Job
built by `controller.runners.manifests.build_sandboxed_job_manifest`. Task fields: "problem_statement", "base_commit"
(optional; default HEAD), "model", "step_limit", "max_tokens", "temperature", "command_timeout_s" (defaults as the
`swe` harness), "sandbox_ready_timeout_s" (default 600: the longest wait for the sandbox loop to start). When the
agent stops, for whatever reason, the harness takes `git diff` of /testbed against the base commit in the sandbox
and writes it to `model.patch` next to task.json (the pod's wrapper returns it with the working directory); a failed
diff goes to `model.patch.error`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from controller.runners.manifests import SANDBOX_WORKDIR
from recipes.swe.harness import DEFAULTS, TRAJECTORY_FILE, build_model, textbased_config
from recipes.swe_bench.sandbox_client import SandboxClient, build_environment

PATCH_FILE, PATCH_ERROR_FILE = "model.patch", "model.patch.error"
DIFF_TIMEOUT_S = 300
BENCH_DEFAULTS = DEFAULTS | {"sandbox_ready_timeout_s": 600}


def diff_command(base_commit: str | None) -> str:
    """The agent's change as one diff: every file (new ones too) staged, then diffed against the base commit;
    git configuration the agent could have set (external diff drivers, text conversion) is bypassed."""
    git = "git -c core.fileMode=false -c safe.directory='*'"
    base = shlex.quote(base_commit) if base_commit else "HEAD"
    return (f"{git} add -A >/dev/null && "
            f"{git} diff --cached --no-color --no-ext-diff --no-textconv --no-renames {base}")


def take_patch(client: SandboxClient, base_commit: str | None, workdir: Path,
               repo_dir: str = SANDBOX_WORKDIR) -> Path:
    """Write the agent's diff of `repo_dir` (or why there is none) next to task.json; returns the file written."""
    result = client.run(diff_command(base_commit), repo_dir, DIFF_TIMEOUT_S)
    if result.returncode == 0 and not result.timed_out:
        target = workdir / PATCH_FILE
        target.write_text(result.output)
        return target
    target = workdir / PATCH_ERROR_FILE
    target.write_text(f"git diff exited {result.returncode} (timed out: {result.timed_out}):\n{result.output}")
    return target


def run_agent(task: dict[str, Any], client: SandboxClient, workdir: Path) -> dict[str, Any]:
    """mini-swe-agent on the problem statement in the sandbox; its exit info."""
    from minisweagent.agents.default import DefaultAgent

    config = textbased_config()
    agent_config = config["agent"] | {"step_limit": task["step_limit"], "cost_limit": 0,
                                      "output_path": workdir / TRAJECTORY_FILE}
    environment = build_environment(client, SANDBOX_WORKDIR, int(task["command_timeout_s"]))
    return DefaultAgent(build_model(task, config), environment, **agent_config).run(task["problem_statement"])


def main() -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    task = BENCH_DEFAULTS | json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())
    workdir = Path.cwd()
    client = SandboxClient.from_env()
    client.wait_ready(float(task["sandbox_ready_timeout_s"]))
    info: dict[str, Any] = {}
    try:
        info = run_agent(task, client, workdir)
    finally:
        written = take_patch(client, task.get("base_commit"), workdir)
    print(json.dumps({"exit_status": info.get("exit_status"), "patch_file": written.name,
                      "patch_chars": written.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
