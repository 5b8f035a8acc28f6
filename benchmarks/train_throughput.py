"""Benchmark: training tokens/s of the torch backend, packed versus padded, against a bare forward/backward loop.

Run: `.venv/bin/python benchmarks/train_throughput.py` (about 3 minutes on 2 cores). Prints a Markdown table;
`--json PATH` also writes the figures. Not a timed test: numbers depend on the machine.

Workload: synthetic multi-turn samples (one per rollout): a prompt, then alternating responses (trainable) and
observations, about half the tokens trainable, lengths spread over a range. Each training step is one optimizer
update over all samples, split into micro-batches under a token budget by `trainer.scheduling`.

Bare loop: on the very same micro-batch tensors (same rows, positions, masks), `model(...).logits` over every
position, token cross-entropy, backward, gradient clipping and an AdamW step: what a plain training loop costs.
The backend does more per token (ratio, clipping, entropy, weights) but runs its output head only on trainable
tokens. Variants are timed round-robin (one step of each per round) so machine noise hits them alike; tokens/s
counts real tokens (padding excluded) over the best step time after one warm-up step (on a shared machine,
noise only adds time; the JSON also has the medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from engines.model_cache import prepare_model
from trainer.backends.base import TrainBatch
from trainer.backends.model_inputs import build_model_inputs
from trainer.backends.torch import OptimizerConfig, TorchBackend, TorchBackendConfig
from trainer.losses import LossDenominators
from trainer.samples import RecordedCall, build_samples
from trainer.scheduling import ScheduleConfig, schedule

WORKLOADS = {
    # model: (samples, min length, max length, micro-batch token budget, measured rounds)
    "tiny": (8, 128, 384, 1024, 3),
    "smollm2-135m-instruct": (4, 128, 256, 512, 3),
}


def synthetic_batch(num_samples: int, min_len: int, max_len: int, seed: int = 0) -> TrainBatch:
    """Multi-turn samples: 25% prompt, then 4 turns of response (trainable) + observation, as recorded calls."""
    rng = np.random.default_rng(seed)
    calls = []
    for rollout in range(num_samples):
        length = int(rng.integers(min_len, max_len + 1))
        prompt = tuple(rng.integers(1, 49152, length // 4).tolist())
        turn = (length - len(prompt)) // 8
        for seq in range(4):
            response = tuple(rng.integers(1, 49152, turn).tolist())
            logprobs = tuple((-rng.uniform(5, 15, turn)).tolist())
            calls.append(
                RecordedCall(f"r{rollout}", f"g{rollout // 4}", seq, prompt, response, logprobs, 0, True, "stop")
            )
            prompt = prompt + response + tuple(rng.integers(1, 49152, turn).tolist())
    samples = build_samples(calls).samples
    return TrainBatch.of(samples, rng.normal(size=len(samples)))


class BareLoop:
    """Forward/backward/AdamW over the micro-batches the backend would use, with plain token cross-entropy."""

    def __init__(self, model_dir: Path, batch: TrainBatch, config: ScheduleConfig) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        plan = schedule(batch.samples, config)
        denominators = LossDenominators.from_sequences(
            [s.rollout_id for s in batch.samples], [s.num_trainable_tokens for s in batch.samples]
        )
        self.inputs = [
            build_model_inputs(
                batch.samples,
                batch.advantages_S,
                mb,
                layout=config.layout,
                denominators=denominators,
                agg_mode="rollout-token-mean",
                pad_token_id=0,
            )
            for update in plan.updates
            for worker in update.workers
            for mb in worker.micro_batches
        ]

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for inputs in self.inputs:
            logits = self.model(
                input_ids=inputs.input_ids,
                position_ids=inputs.position_ids,
                attention_mask=inputs.attention_mask,
                use_cache=False,
            ).logits
            labels = inputs.input_ids[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels.flatten())
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()


def bench_model(name: str) -> list[dict[str, float | str]]:
    """Best step time of backend and bare loop, packed and padded, for one model."""
    num_samples, min_len, max_len, budget, rounds = WORKLOADS[name]
    model_dir = prepare_model(name)
    batch = synthetic_batch(num_samples, min_len, max_len)
    tokens = sum(s.num_tokens for s in batch.samples)
    runners: dict[tuple[str, str], object] = {}
    for layout in ("packed", "padded"):
        config = ScheduleConfig(max_tokens_per_micro_batch=budget, layout=layout)
        backend = TorchBackend(TorchBackendConfig(model_dir, optimizer=OptimizerConfig(lr=1e-6), schedule=config))
        backend.load()
        runners[(layout, "backend")] = lambda b=backend: b.train_step(batch)
        runners[(layout, "bare")] = BareLoop(model_dir, batch, config).step
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runners}
    for round_index in range(rounds + 1):
        for key, run in runners.items():
            started = time.perf_counter()
            run()
            if round_index > 0:
                times[key].append(time.perf_counter() - started)
    rows = []
    for layout in ("packed", "padded"):
        plan = schedule(batch.samples, ScheduleConfig(max_tokens_per_micro_batch=budget, layout=layout))
        backend_s = min(times[(layout, "backend")])
        bare_s = min(times[(layout, "bare")])
        rows.append(
            {
                "model": name,
                "layout": layout,
                "tokens": tokens,
                "trainable": sum(s.num_trainable_tokens for s in batch.samples),
                "micro_batches": plan.metrics["schedule/micro_batches"],
                "padding_waste": plan.metrics["schedule/padding_waste"],
                "backend_tokens_per_s": tokens / backend_s,
                "bare_tokens_per_s": tokens / bare_s,
                "backend_over_bare": bare_s / backend_s,
                "backend_median_s": statistics.median(times[(layout, "backend")]),
                "bare_median_s": statistics.median(times[(layout, "bare")]),
            }
        )
    return rows


def report(rows: list[dict[str, float | str]]) -> str:
    lines = [
        "| model | layout | tokens (trainable) | micro-batches | padding waste | backend tok/s | bare loop tok/s "
        "| backend / bare |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layout']} | {r['tokens']:,} ({r['trainable']:,}) | {r['micro_batches']:.0f} "
            f"| {r['padding_waste']:.1%} | {r['backend_tokens_per_s']:,.0f} | {r['bare_tokens_per_s']:,.0f} "
            f"| {r['backend_over_bare']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [row for name in args.models for row in bench_model(name)]
    print(report(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
