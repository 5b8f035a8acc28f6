"""The coding-CLI harness: `python -m recipes.cli_harness.harness {claude-code|codex} BINARY`, unmodified Claude Code
or Codex on the SWE recipe's working directory (`task.json`, `repo/`), non-interactively.

It turns the harness contract into the CLI's own configuration (`launch.py`: env, argv, Codex's config.toml, HOME a
throw-away folder in the working directory), runs the CLI's native binary in `repo/`, keeps its stdout in
`cli_output.jsonl` next to `repo/` (for humans: the grader computes the diff itself), prints one summary line and
exits as mini-swe-agent's harness would (`outcome.py`); a CLI that is not installed (`make harnesses`) is exit 2 with
the fix. Under the local runner all of it runs inside the runner's
sandbox: the CLI and every command it runs see only the working directory (writable), the interpreter, this code and
the binary (read-only), and their rollout's gateway path. Unlike mini-swe-agent's, the CLI's commands are not
sandboxed one by one: they run in the harness's sandbox, which is the boundary (the rollout key they could read opens
only their own rollout's path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from recipes.cli_harness.binaries import CLIS, missing_binary
from recipes.cli_harness.launch import REPO_DIR, Contract, Launch, claude_code_launch, codex_launch
from recipes.cli_harness.outcome import classify

OUTPUT_FILE = "cli_output.jsonl"
LAUNCHERS = {"claude-code": claude_code_launch, "codex": codex_launch}


def load_task() -> dict[str, Any]:
    """The task JSON named by $HARNESSRL_TASK (default ./task.json)."""
    return json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())


def write_files(launch: Launch) -> None:
    """The CLI's per-rollout files and its HOME, readable by this uid only."""
    Path(launch.env["HOME"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    for path, text in launch.files.items():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)


def run_cli(launch: Launch, output: Path) -> int:
    """Run the CLI to its end in a process group of its own (SIGTERM to the harness reaches the whole group)."""
    with output.open("wb") as out:
        proc = subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd, stdin=subprocess.DEVNULL, stdout=out,
                                start_new_session=True)

        def forward(signum: int, _frame: object) -> None:
            os.killpg(proc.pid, signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        return proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in LAUNCHERS:
        print(f"usage: python -m recipes.cli_harness.harness {{{'|'.join(LAUNCHERS)}}} BINARY", file=sys.stderr)
        return 2
    cli, binary = args[0], Path(args[1])
    workdir = Path.cwd()
    if (problem := missing_binary(CLIS[cli], binary)) is not None:
        print(problem, file=sys.stderr)
        return 2
    if not (workdir / REPO_DIR).is_dir():
        print(f"no {REPO_DIR}/ in {workdir}: the recipe's prepare_workdir lays it out", file=sys.stderr)
        return 2
    launch = LAUNCHERS[cli](binary, load_task(), Contract.from_env(os.environ), workdir,
                            Path(sys.executable).parent, os.environ)
    write_files(launch)
    returncode = run_cli(launch, workdir / OUTPUT_FILE)
    outcome = classify(cli, returncode, (workdir / OUTPUT_FILE).read_text(errors="replace"))
    print(json.dumps({"cli": cli, "exit_status": outcome.exit_status, "returncode": returncode, **outcome.details}))
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
