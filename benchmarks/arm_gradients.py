"""How differently the ablation's arms push the policy on one fixed batch: the cosine of their gradients.

    nice .venv/bin/python benchmarks/multistep_samples.py --tasks 16 --group 4 --save /tmp/episodes.json
    nice .venv/bin/python benchmarks/arm_gradients.py /tmp/episodes.json [--batch-tasks 4]

Loads the saved rollouts (recorded calls and the multistep grader's rewards), builds each batch of `--batch-tasks`
groups as a training step does (samples by token-prefix merging, then each arm's advantages:
`flows.ablation_plan.REPORT_ARMS`' advantage level and loss aggregation), takes every arm's gradient at the base
weights (`TorchBackend.batch_gradient`, one update over the whole batch) and prints, per batch, the within-group
spread of samples per rollout (`trainer.split_spread`) and the pairwise cosines and norm ratios of the arms'
gradients. Arms whose gradients have cosine ~1 differ only by a step size on that batch.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from engines.model_cache import prepare_model  # noqa: E402
from flows.ablation_plan import REPORT_ARMS  # noqa: E402
from gateway.records import CallRecord  # noqa: E402
from trainer.advantages import AdvantageConfig, RolloutOutcome, sample_advantages  # noqa: E402
from trainer.backends.base import TrainBatch  # noqa: E402
from trainer.backends.torch import OptimizerConfig, TorchBackend, TorchBackendConfig  # noqa: E402
from trainer.losses import LossConfig  # noqa: E402
from trainer.recorded import to_recorded_call  # noqa: E402
from trainer.samples import SampleLimits, build_samples  # noqa: E402
from trainer.scheduling import ScheduleConfig  # noqa: E402
from trainer.split_spread import split_spread_metrics  # noqa: E402


def arm_batch(rows: list[dict], level: str, limits: SampleLimits, decode) -> TrainBatch:
    """The batch a training step would build from these rollouts with advantages at `level`."""
    calls = [to_recorded_call(CallRecord.model_validate(call), row["group_id"])
             for row in rows for call in row["calls"]]
    built = build_samples(calls, limits=limits, decode=decode)
    outcomes = [RolloutOutcome(row["rollout_id"], row["group_id"], row["reward"], None) for row in rows]
    advantages = sample_advantages([s.rollout_id for s in built.samples], outcomes, AdvantageConfig(level=level))
    return TrainBatch.of(built.samples, advantages.advantages_S)


def cosine_and_ratio(grad_a: torch.Tensor, grad_b: torch.Tensor) -> tuple[float, float]:
    """Cosine and norm ratio of two flat gradients, summed in float64 (in float32 over ~1e8 weights the cosine
    reached 1.0008)."""
    a, b = grad_a.double(), grad_b.double()
    norm_a, norm_b = float(a.norm()), float(b.norm())
    if norm_a == 0 or norm_b == 0:
        return float("nan"), float("nan")
    return float(a @ b) / (norm_a * norm_b), norm_a / norm_b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("episodes", type=Path, help="benchmarks/multistep_samples.py --save output")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch-tasks", type=int, default=4, help="groups per batch (the ablation profile: 4)")
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()

    rows = json.loads(args.episodes.read_text())
    model_dir = prepare_model(args.model)
    decode = AutoTokenizer.from_pretrained(str(model_dir)).decode
    limits = SampleLimits(max_response_tokens=args.max_tokens)
    backend = TorchBackend(TorchBackendConfig(model_dir, optimizer=OptimizerConfig(lr=0.0),
                                              schedule=ScheduleConfig(max_tokens_per_micro_batch=4096,
                                                                      layout="padded")))
    backend.load()  # one model for every arm (three copies and their gradients ran out of 24 GB): each arm's loss
    groups = list(dict.fromkeys(row["group_id"] for row in rows))
    for first in range(0, len(groups), args.batch_tasks):
        chosen = set(groups[first : first + args.batch_tasks])
        batch_rows = [row for row in rows if row["group_id"] in chosen]
        gradients = {}
        for arm in REPORT_ARMS:
            batch = arm_batch(batch_rows, arm.overrides["algorithm.advantage.level"], limits, decode)
            backend.config = replace(backend.config, loss=LossConfig(agg_mode=arm.overrides["backend.loss.agg_mode"]))
            gradients[arm.name] = backend.batch_gradient(batch)
        spread = split_spread_metrics((s.rollout_id, s.group_id) for s in batch.samples)
        rewards = [round(row["reward"], 2) for row in batch_rows]
        print(f"batch {first // args.batch_tasks + 1}: {len(batch.samples)} samples of {len(batch_rows)} rollouts; "
              f"within-group variance of samples per rollout {spread['samples/per_rollout_var_within_group']:.3g}, "
              f"groups with varied splits {spread['samples/groups_with_varied_splits_share']:.2f}; rewards {rewards}")
        if not any(bool(grad.any()) for grad in gradients.values()):
            print("  no gradient in any arm (every group's rewards equal)")
            continue
        for (name_a, grad_a), (name_b, grad_b) in combinations(gradients.items(), 2):
            cosine, ratio = cosine_and_ratio(grad_a, grad_b)
            print(f"  cos({name_a}, {name_b}) = {cosine:.4f}; norm ratio {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
