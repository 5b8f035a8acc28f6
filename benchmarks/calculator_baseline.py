"""The calculator recipe's untrained baseline: how often the policy calls the tool, and how often it answers right.

Runs the real harness (`python -m recipes.calculator.harness`, one subprocess per rollout under the harness contract,
`--concurrency` at a time) on a seed's first `--tasks` tasks through an in-process gateway (train mode: the gateway
enforces `--temperature` on every call, as in training) in front of the embedded engine serving `--model`, once per
first-turn tool_choice (`--force`: `tool` forces the calculator, `auto` leaves it to the model), grades each rollout
with the recipe's grader and prints per condition: rollouts whose answer to the first call was a parsed tool call,
rollouts with any parsed tool call, rollouts where the calculator computed a result (a later request holds a tool
result that is not an error), calls whose tool call the gateway could not parse (`model_tool_arguments`), and the
reward (sums and products apart), and the training samples per rollout (the recorded calls merged as a training step
does; `--recorded-turns` starts the gateway with `recorded_turns: true`, so a re-sent turn is prompted from its
recorded tokens).
Run: `nice .venv/bin/python benchmarks/calculator_baseline.py [--tasks 20] [--force tool auto] [--recorded-turns]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.recipe import TASK_FILE, GradeInput  # noqa: E402
from engines.embedded import EmbeddedEngine  # noqa: E402
from engines.model_cache import prepare_model  # noqa: E402
from gateway.client import GatewayClient  # noqa: E402
from gateway.records import CallRecord, RolloutSpec  # noqa: E402
from recipes.calculator.recipe import RECIPE  # noqa: E402
from recipes.calculator.tool_calls import called_a_tool  # noqa: E402
from tests.gateway.support import ADMIN_TOKEN  # noqa: E402
from tests.inprocess import InProcessGateway  # noqa: E402
from trainer.recorded import to_recorded_call  # noqa: E402
from trainer.samples import build_samples  # noqa: E402

HARNESS_TIMEOUT_S = 600  # the profile's controller.harness_timeout_s


def tool_computed(calls: list[CallRecord]) -> bool:
    """Whether some request after the first carries a calculator result that is not an error."""
    for call in calls[1:]:
        for message in call.request.get("messages", []):
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result" and not block.get("is_error"):
                    return True
    return False


def run_rollout(admin: GatewayClient, task: dict[str, Any], folder: Path) -> dict[str, Any]:
    """One rollout as the controller runs it: task file, harness subprocess, recorded calls, the grade."""
    created = admin.create_rollouts([RolloutSpec(id=task["id"], group_id=task["id"])])[0]
    workdir = folder / task["id"]
    workdir.mkdir()
    (workdir / TASK_FILE).write_text(json.dumps(task))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "ANTHROPIC_"))}
    env |= {"OPENAI_BASE_URL": created.base_url, "OPENAI_API_KEY": created.api_key,
            "HARNESSRL_TASK": str(workdir / TASK_FILE)}
    try:
        done = subprocess.run(RECIPE.harness_command(), cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=HARNESS_TIMEOUT_S)
        exit_code, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as expired:  # killed, as the controller does: graded on what it recorded
        exit_code, stderr = None, f"timed out after {HARNESS_TIMEOUT_S} s: {expired.stderr!r}"
    calls = admin.calls(task["id"])
    grade = RECIPE.grade(GradeInput(task=task, workdir=workdir, calls=calls, exit_code=exit_code))
    return {"id": task["id"], "operation": task["operation"], "exit": exit_code, "reward": grade.reward,
            "calls": len(calls), "first_call_tool": bool(calls) and called_a_tool(calls[0]),
            "any_tool": grade.details["tool_calls"] > 0, "tool_computed": tool_computed(calls),
            "unparsed_tool_calls": sum(c.error_code == "model_tool_arguments" for c in calls),
            "samples": len(build_samples([to_recorded_call(c, task["id"]) for c in calls]).samples),
            "recorded_prefix_calls": sum(bool(c.recorded_prefix) for c in calls),
            "final": grade.details["answer_text"][-80:], "expected": grade.details["expected"],
            "stderr": stderr[-400:]}


def summary(force: str, temperature: float, rows: list[dict[str, Any]], seconds: float) -> str:
    """One condition's line: tool-call rates, unparsable calls, failed harnesses, rewards per operation."""
    n = len(rows)

    def count(key: str) -> str:
        return f"{sum(bool(r[key]) for r in rows)}/{n}"

    def reward(operation: str | None = None) -> str:
        chosen = [r for r in rows if operation in (None, r["operation"])]
        return f"{sum(r['reward'] for r in chosen):g}/{len(chosen)}"

    return (f"first-turn tool_choice={force}, temperature {temperature:g}: {n} rollouts in {seconds:.0f} s; "
            f"first call a parsed tool call {count('first_call_tool')}, any parsed tool call {count('any_tool')}, "
            f"calculator computed {count('tool_computed')}, unparsable tool calls "
            f"{sum(r['unparsed_tool_calls'] for r in rows)}, harness exit != 0 {sum(r['exit'] != 0 for r in rows)}; "
            f"reward {reward()} (sums {reward('sum')}, products {reward('product')}); calls per rollout "
            f"{sum(r['calls'] for r in rows) / max(n, 1):.2f}, samples per rollout "
            f"{sum(r['samples'] for r in rows) / max(n, 1):.2f}, calls prompted from recorded tokens "
            f"{sum(r['recorded_prefix_calls'] for r in rows)}")


def measure(admin: GatewayClient, args: argparse.Namespace, force: str, folder: Path) -> None:
    """One condition on the seed's first tasks; prints its summary and a few final texts."""
    tasks = [{**task, "id": f"{task['id']}-{force}", "max_tokens": args.max_tokens, "force_tool": force == "tool"}
             for task in RECIPE.generate(args.tasks, args.seed)]
    folder.mkdir()
    started = time.monotonic()
    with ThreadPoolExecutor(args.concurrency) as pool:
        rows = list(pool.map(lambda task: run_rollout(admin, task, folder), tasks))
    print(summary(force, args.temperature, rows, time.monotonic() - started), flush=True)
    for row in rows[: args.show]:
        print(f"  {row['id']} expected {row['expected']}: reward {row['reward']:g}, final text {row['final']!r}")
    for row in [r for r in rows if r["exit"] != 0][:1]:
        print(f"  {row['id']} harness exit {row['exit']}: {row['stderr']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--seed", type=int, default=1000, help="task seed (training data uses 0 by default)")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--force", nargs="+", default=["tool", "auto"], choices=["tool", "auto"])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0, help="the gateway's train sampling temperature")
    parser.add_argument("--recorded-turns", action="store_true", help="gateway recorded_turns: true")
    parser.add_argument("--show", type=int, default=4, help="final texts printed per condition")
    args = parser.parse_args()

    engine = EmbeddedEngine(prepare_model(args.model), served_model_name="policy", max_batch_size=32)
    engine.start()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "gateway.yaml"
        config.write_text(f"sampling: {{temperature: {args.temperature}}}\n"
                          f"recorded_turns: {str(args.recorded_turns).lower()}\n")
        gateway = InProcessGateway(Path(folder) / "store.db", config_path=config).start()
        try:
            with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
                admin.register_model("policy", engine.base_url + "/v1")
                for force in args.force:
                    measure(admin, args, force, Path(folder) / force)
        finally:
            gateway.stop()
            engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
