"""A small synthetic SWE training run logged to a real MLflow server through the tracking package (MlflowTracker,
tracking.traces.rollout_trace): two runs with a few steps of metrics, and in the first a group of SWE rollouts as
traces (a read / edit / test episode in chat tool calls, rewards as feedback, the group as the session).

For the screenshot test (tests/tracking/test_screenshots.py) and for trying the UI by hand:
`.venv/bin/python -m tests.tracking.synthetic_run --tracking-uri http://127.0.0.1:5000`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from gateway.records import CallRecord, Rollout, RolloutState
from tracking.mlflow_tracker import MlflowTracker
from tracking.traces import TraceContext, rollout_trace

EXPERIMENT = "swe-synthetic"
STEPS = 8
TASK = {"id": "swe-gen-0042", "repo": "textkit", "problem_statement":
        "slugify() keeps trailing dashes: slugify('Hello, World!') returns 'hello-world-' instead of 'hello-world'."}
SYSTEM = {"role": "system", "content": "You are a software engineer. Use the bash tool to inspect and fix the "
                                       "repository, then run its tests. Reply DONE when the tests pass."}
USER = {"role": "user", "content": f"Fix this issue in the repository at /work:\n{TASK['problem_statement']}"}
BASH_TOOL = {"type": "function", "function": {"name": "bash", "description": "Run a shell command",
                                              "parameters": {"type": "object",
                                                             "properties": {"command": {"type": "string"}}}}}
EPISODE = [  # (the command the model runs, what the tool answers)
    ("cat textkit/slug.py", "import re\n\ndef slugify(text):\n    return re.sub(r'[^a-z0-9]+', '-', text.lower())\n"),
    ("sed -i \"s/text.lower())/text.lower()).strip('-')/\" textkit/slug.py", ""),
    ("python -m pytest -q tests/test_slug.py", "....                                     [100%]\n4 passed in 0.03s"),
]


@dataclass(frozen=True)
class SyntheticRun:
    """What was logged: the experiment, the two runs, the traced rollouts' ids and trace ids, the group."""

    experiment_id: str
    run_ids: tuple[str, str]
    rollout_ids: tuple[str, ...]
    trace_ids: tuple[str, ...]
    group_id: str


def _tool_call(i: int, command: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def episode_calls(rollout_id: str, start_s: float, solved: bool) -> list[CallRecord]:
    """The recorded chat calls of one episode: a tool call per step of EPISODE, then the final answer; an unsolved
    episode stops after reading the file."""
    steps = EPISODE if solved else EPISODE[:1]
    messages: list[dict[str, Any]] = [SYSTEM, USER]
    calls = []
    for seq in range(len(steps) + 1):
        last = seq == len(steps)
        answer = ("DONE: slugify now strips leading and trailing dashes; the tests pass." if solved
                  else "I could not find the problem.") if last else None
        call_json = None if last else _tool_call(seq, steps[seq][0])
        response = {"choices": [{"index": 0, "finish_reason": "stop" if last else "tool_calls", "message": {
            "role": "assistant", "content": answer, "tool_calls": None if last else [call_json]}}]}
        calls.append(CallRecord(
            id=seq, rollout_id=rollout_id, attempt=1, seq=seq, kind="chat", stream=False, model="policy",
            upstream="http://127.0.0.1:8001/v1", status="ok", http_status=200, error=None,
            request={"model": "policy", "messages": list(messages), "tools": [BASH_TOOL]},
            response_raw=json.dumps(response), response_id=f"chatcmpl-{rollout_id}-{seq}",
            prompt_token_ids=list(range(180 + 60 * seq)), response_token_ids=list(range(24)),
            response_logprobs=[-0.4] * 24, response_text=answer or "", finish_reason="stop" if last else "tool_calls",
            n_choices=1, policy_version=3, latency_ms=850.0 + 40 * seq, created_at=start_s + 2.5 * seq))
        if not last:
            messages = [*messages, {"role": "assistant", "content": None, "tool_calls": [call_json]},
                        {"role": "tool", "tool_call_id": f"call_{seq}", "content": steps[seq][1]}]
    return calls


def _rollout(rollout_id: str, group_id: str, start_s: float, reward: float, n_calls: int) -> Rollout:
    return Rollout(id=rollout_id, group_id=group_id, input=TASK, mode="train", state=RolloutState.SUCCEEDED,
                   attempt=1, max_attempts=3, reward=reward, created_at=start_s - 1.0, started_at=start_s - 0.5,
                   finished_at=start_s + 2.5 * n_calls + 1.0, finished_seq=1)


def _metrics(step: int, lr_scale: float) -> dict[str, float]:
    progress = 1.0 - math.exp(-lr_scale * (step + 1) / 3)
    return {"rollout/reward_mean": 0.15 + 0.6 * progress, "val/reward_mean": 0.1 + 0.55 * progress,
            "loss/total": 0.9 - 0.5 * progress, "loss/kl": 0.002 * (step + 1) * lr_scale,
            "train/tokens_per_s": 1800.0 + 40 * step}


def log_synthetic_run(tracking_uri: str, experiment: str = EXPERIMENT, group_size: int = 4) -> SyntheticRun:
    """Two runs (`lr-1e-6`, `lr-3e-6`) with STEPS steps of metrics; the first also logs one group of `group_size`
    SWE rollouts (every other one solved) as traces of its experiment, timed in the last minutes (the UI's trace
    list shows recent traces by default)."""
    start_s = time.time() - 120.0
    group_id = "g-swe-gen-0042-it3"
    rollout_ids, trace_ids, run_ids = [], [], []
    for name, lr_scale in (("lr-1e-6", 1.0), ("lr-3e-6", 2.2)):
        with MlflowTracker(tracking_uri, experiment, run_name=name) as tracker:
            tracker.log_params({"recipe": "swe", "algorithm.lr_scale": lr_scale})
            for step in range(STEPS):
                tracker.log_metrics(_metrics(step, lr_scale), step=step)
            if not rollout_ids:
                drafts = []
                for i in range(group_size):
                    rollout_id = f"r-swe-gen-0042-{i}"
                    solved = i % 2 == 0
                    begin = start_s + 3.0 * i
                    calls = episode_calls(rollout_id, begin, solved)
                    rollout = _rollout(rollout_id, group_id, begin, 1.0 if solved else 0.0, len(calls))
                    drafts.append(rollout_trace(rollout, calls, TraceContext(
                        recipe="swe", run_id=tracker.run_id, iteration=3, submitted_version=3),
                        {"reason": "tests pass" if solved else "tests fail"}))
                    rollout_ids.append(rollout_id)
                trace_ids = tracker.log_traces(drafts)
            run_ids.append(tracker.run_id)
            experiment_id = tracker.experiment_id
    return SyntheticRun(experiment_id, (run_ids[0], run_ids[1]), tuple(rollout_ids), tuple(trace_ids), group_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--experiment", default=EXPERIMENT)
    args = parser.parse_args()
    print(json.dumps(log_synthetic_run(args.tracking_uri, args.experiment).__dict__, indent=1))


if __name__ == "__main__":
    main()
