"""Samples per rollout of each real coding CLI on the scripted SWE episode, the gateway's recorded turns off and on.

`python -m benchmarks.cli_samples [--rollouts 2]` (as root: the local runner sandboxes the CLI as another uid; the
CLIs installed by `make harnesses`). Each rollout is the slow test's episode
(tests/recipes/test_cli_scripted_episode.py: read the file, edit it, run the tests, finish; Claude Code's
Read/Edit/Bash, Codex's exec_command and free-form apply_patch), run by the controller through an in-process gateway
in front of the scripted upstream, which renders ChatML one token per character as a chat template would
(tests/recipes/cli_episode.py). Prints one row per CLI and
setting: calls, samples per rollout (the trainer's build), calls whose prompt came from the records
(`CallRecord.recorded_prefix` > 0), and the median gateway latency of the calls after the first (the recorded turns'
cost: the attempt's calls read and three /tokenize round trips).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from gateway.client import GatewayClient
from gateway.records import RolloutSpec, RolloutState
from recipes.cli_harness.launch import REPO_DIR
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from tests.recipes.cli_episode import Episode, EpisodeUpstream, claude_code_steps, codex_steps
from tests.recipes.cli_support import attempt_dir, built_samples, generated_task, run_through_controller, task_input

OVERRIDES = {"model": "policy", "step_limit": 8, "max_tokens": 256, "command_timeout_s": 60}


def one_rollout(cli: str, recorded_turns: bool, root: Path) -> dict[str, float]:
    """One episode of `cli`; its counts."""
    task = generated_task(root / "task")
    rollout_id, patch = f"{cli}-bench", task.instance["patch"]
    repo = attempt_dir(root, rollout_id) / REPO_DIR
    upstream = EpisodeUpstream(Episode(claude_code_steps(repo, patch) if cli == "claude-code" else codex_steps(patch)))
    (root / "gateway.yaml").write_text(f"recorded_turns: {str(recorded_turns).lower()}\n")
    gateway = InProcessGateway(root / "gateway.db", root / "gateway.yaml").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            spec = RolloutSpec(id=rollout_id, group_id="g", input=task_input(task, cli, OVERRIDES), max_attempts=1)
            rollout = run_through_controller(gateway.url, spec, root, timeout_s=180)
            calls = admin.calls(rollout_id)
    finally:
        gateway.stop()
        upstream.close()
    if rollout.state != RolloutState.SUCCEEDED or rollout.reward != 1.0:
        raise RuntimeError(f"{cli}: the episode did not end fixed: {rollout.state} {rollout.reward} {rollout.error}")
    main = [call for call in calls if not call.side]
    return {"calls": len(main), "samples": built_samples(calls, "g").stats.samples,
            "recorded": sum(1 for call in main if call.recorded_prefix), "later_ms": statistics.median(
                call.latency_ms for call in main[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=2, help="episodes per CLI and setting")
    args = parser.parse_args()
    print("| CLI | recorded turns | calls / rollout | samples / rollout | calls on recorded tokens | "
          "median latency of later calls (ms) |")
    print("|---|---|---|---|---|---|")
    for cli in ("claude-code", "codex"):
        for recorded_turns in (False, True):
            rows = []
            for _ in range(args.rollouts):
                with tempfile.TemporaryDirectory() as root:
                    rows.append(one_rollout(cli, recorded_turns, Path(root)))
            mean = {key: statistics.mean(row[key] for row in rows) for key in rows[0]}
            print(f"| {cli} | {'on' if recorded_turns else 'off'} | {mean['calls']:.1f} | {mean['samples']:.1f} | "
                  f"{mean['recorded']:.1f} | {mean['later_ms']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
