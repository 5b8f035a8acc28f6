"""Samples per rollout of the multistep recipe on a real model: the ablation's training batches replayed.

Runs the multistep harness (`recipes.multistep.harness.run_episode`, in threads) on a seed's first tasks, `--group`
rollouts each, through an in-process gateway in front of the embedded engine (SmolLM2-135M-Instruct by default, the
ablation profile's max_tokens 24), then builds samples from the gateway's recorded calls exactly as a training step
does (`trainer.recorded` + `trainer.samples.build_samples` with the tokenizer's decode) and prints, per batch of
`--batch-tasks` tasks, the samples per rollout, each group's split counts, the within-group variance of samples per
rollout and the share of groups where it is not zero (`trainer.split_spread`), and the merge failures by class. Run:
`nice .venv/bin/python benchmarks/multistep_samples.py [--seed 0] [--tasks 12] [--group 4] [--batch-tasks 4]
[--compact-above-tokens 150] [--save episodes.json]`; `--save` keeps every rollout's recorded calls and reward (the
multistep grader's) for `benchmarks/arm_gradients.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from openai import OpenAI  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from engines.embedded import EmbeddedEngine  # noqa: E402
from engines.model_cache import prepare_model  # noqa: E402
from gateway.client import GatewayClient  # noqa: E402
from gateway.records import RolloutSpec  # noqa: E402
from recipes.multistep.grader import part_replies, score_replies  # noqa: E402
from recipes.multistep.harness import run_episode  # noqa: E402
from recipes.multistep.tasks import generate  # noqa: E402
from tests.gateway.support import ADMIN_TOKEN  # noqa: E402
from tests.inprocess import InProcessGateway  # noqa: E402
from trainer.recorded import to_recorded_call  # noqa: E402
from trainer.samples import SampleLimits, build_samples  # noqa: E402
from trainer.split_spread import split_spread_metrics  # noqa: E402


def save_episodes(path: Path, jobs: list, recorded: dict) -> None:
    """Each rollout's group (task id), recorded calls and the multistep grader's reward, as JSON."""
    rows = [{"group_id": task["id"], "rollout_id": created.id,
             "reward": score_replies(part_replies(recorded[created.id]), task["steps"]).reward,
             "calls": [call.model_dump(mode="json") for call in recorded[created.id]]} for task, created in jobs]
    path.write_text(json.dumps(rows))
    print(f"saved {len(rows)} rollouts to {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--seed", type=int, default=0, help="the ablation's training seed (tasks: generate(64, seed))")
    parser.add_argument("--tasks", type=int, default=12, help="the seed's first tasks (the profile: 3 x 4)")
    parser.add_argument("--group", type=int, default=4, help="rollouts per task")
    parser.add_argument("--batch-tasks", type=int, default=4, help="tasks per training batch")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--compact-above-tokens", type=int, default=None,
                        help="the harness's compaction budget (default: the tasks' own)")
    parser.add_argument("--save", type=Path, default=None, help="write the rollouts' calls and rewards here (JSON)")
    args = parser.parse_args()

    model_dir = prepare_model(args.model)
    decode = AutoTokenizer.from_pretrained(str(model_dir)).decode
    limits = SampleLimits(max_response_tokens=args.max_tokens)
    budget = {} if args.compact_above_tokens is None else {"compact_above_tokens": args.compact_above_tokens}
    tasks = [{**task, "max_tokens": args.max_tokens, **budget} for task in generate(64, args.seed)[: args.tasks]]
    engine = EmbeddedEngine(model_dir, served_model_name="policy", max_batch_size=32)
    engine.start()
    with tempfile.TemporaryDirectory() as folder:
        gateway = InProcessGateway(Path(folder) / "store.db").start()
        try:
            with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
                admin.register_model("policy", engine.base_url + "/v1")
                jobs = [(task, admin.create_rollouts([RolloutSpec(id=f"{task['id']}-r{k}", group_id=task["id"])])[0])
                        for task in tasks for k in range(args.group)]

                def episode(job):
                    task, created = job
                    client = OpenAI(base_url=created.base_url, api_key=created.api_key, timeout=600)
                    try:
                        return len(run_episode(client, task)), None
                    except Exception as error:  # noqa: BLE001 - reported per rollout
                        return None, repr(error)

                started = time.monotonic()
                with ThreadPoolExecutor(args.batch_tasks * args.group) as pool:
                    outcomes = list(pool.map(episode, jobs))
                print(f"{len(jobs)} rollouts in {time.monotonic() - started:.0f} s")
                recorded = {created.id: admin.calls(created.id) for _, created in jobs}
        finally:
            gateway.stop()
            engine.stop()
    errors = [error for _, error in outcomes if error]
    finish = Counter(call.finish_reason for calls in recorded.values() for call in calls)
    status = Counter(str(call.status) for calls in recorded.values() for call in calls)
    print(f"harness errors {len(errors)} {errors[:3]}; calls by status {dict(status)}; by finish reason {dict(finish)}")
    print(f"rollouts that made every part: {sum(len(recorded[c.id]) == len(t['steps']) for t, c in jobs)}/{len(jobs)}")
    if args.save is not None:
        save_episodes(args.save, jobs, recorded)
    per_batch = args.batch_tasks * args.group
    for first in range(0, len(jobs), per_batch):
        batch = jobs[first : first + per_batch]
        calls = [to_recorded_call(call, task["id"]) for task, created in batch for call in recorded[created.id]]
        built = build_samples(calls, limits=limits, decode=decode)
        stats = built.stats
        spread = split_spread_metrics((sample.rollout_id, sample.group_id) for sample in built.samples)
        per_rollout = Counter(sample.rollout_id for sample in built.samples)
        splits: dict[str, list[int]] = {}
        for task, created in batch:
            splits.setdefault(task["id"][-5:], []).append(per_rollout[created.id])
        print(f"batch {first // per_batch + 1}: {stats.samples} samples, {stats.samples / len(batch):.4g} per "
              f"rollout; splits by group {splits}; within-group variance "
              f"{spread['samples/per_rollout_var_within_group']:.3g}, groups with varied splits "
              f"{spread['samples/groups_with_varied_splits_share']:.2f}; calls {stats.calls}, merged "
              f"{stats.calls_merged}; merge failures other {stats.merge_failures_other} (compactions), "
              f"retokenization {stats.merge_failures_retokenization}, template {stats.merge_failures_template}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
