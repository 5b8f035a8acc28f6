"""`TorchBackend`: PPO-style policy updates of any HF causal LM on CPU with plain torch.

A training step schedules the batch's samples with `trainer.scheduling` (one worker, rollout-atomic optimizer
updates, packed or padded micro-batches under a token budget). For each update it counts the loss
denominators over the whole update, accumulates the gradient of every micro-batch's additive loss share
(`trainer.losses.policy_loss` on logprobs recomputed from the model against the recorded rollout logprobs),
clips the gradient norm and takes one AdamW step (on fp32 master weights when the model is bf16:
`trainer.backends.master_weights`). With `loss.off_policy.recompute_behaviour` (decoupled PPO), a no-grad pass over
every micro-batch first recomputes the proximal logprobs at the step's starting weights. The `off_policy/...`
mismatch and lag metrics (`trainer.off_policy_metrics`) compare the recorded logprobs with the trainer's at the
starting weights: the recomputation when there is one, else the first optimizer update's own forward passes (no
extra pass; they cover the whole batch when a step is one update, `off_policy/measured_token_fraction` says how
much). Every step adds one to the policy version. Dropout is off (the model stays in eval mode): the ratio must
compare the same function the engine samples from.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoModelForCausalLM

from engines.cpu_bf16 import warn_if_emulated_bf16
from trainer import checkpoints
from trainer.backends.base import TrainBatch
from trainer.backends.master_weights import MasterWeights
from trainer.backends.model_inputs import ModelInputs, build_model_inputs
from trainer.backends.token_logprobs import check_plain_output_head, token_logprobs
from trainer.losses import LossBatch, LossConfig, LossDenominators, policy_loss
from trainer.off_policy_metrics import OffPolicyMeter, target_layout
from trainer.samples import Sample
from trainer.scheduling import ScheduleConfig, UpdatePlan, schedule

DType = Literal["float32", "bfloat16"]
"""Parameter dtype (float32 unless memory forces bfloat16; bfloat16 trains fp32 master weights)."""


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW, gradient clipping and warm-up."""

    lr: float = 1e-6
    """Peak learning rate (0: the loop runs and updates nothing, the control of a learning-rate sweep)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment decay rates."""
    eps: float = 1e-8
    """AdamW denominator epsilon."""
    weight_decay: float = 0.01
    """Decoupled weight decay."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient L2 norm to this; None: no clipping (the norm is still reported)."""
    warmup_updates: int = 0
    """Optimizer updates of linear warm-up from lr / warmup_updates to lr."""

    def __post_init__(self) -> None:
        if self.lr < 0 or self.eps <= 0 or self.weight_decay < 0 or self.warmup_updates < 0:
            raise ValueError(
                f"OptimizerConfig lr={self.lr}, eps={self.eps}, weight_decay={self.weight_decay}, "
                f"warmup_updates={self.warmup_updates}: use lr >= 0 (0: a control that never changes the weights), "
                "eps > 0, weight_decay >= 0, warmup >= 0"
            )
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"OptimizerConfig.max_grad_norm={self.max_grad_norm}: use a positive value or None")


def warmup_lr(base_lr: float, update_index: int, warmup_updates: int) -> float:
    """Learning rate of optimizer update `update_index` (0-based) under linear warm-up."""
    if warmup_updates <= 0:
        return base_lr
    return base_lr * min(1.0, (update_index + 1) / warmup_updates)


@dataclass(frozen=True)
class TorchBackendConfig:
    """What to train and how."""

    model_path: Path
    """HF model directory of the base policy (also the KL reference)."""
    resume_from: Path | None = None
    """A checkpoint written by this backend to resume from (weights, optimizer, step, version)."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """Optimizer settings."""
    loss: LossConfig = LossConfig()
    """Policy-loss settings (rollout-token-mean by default)."""
    schedule: ScheduleConfig = ScheduleConfig()
    """Micro-batching; num_workers must be 1 (this backend is one process)."""
    dtype: DType = "float32"
    """Parameter dtype of the model (forward and backward); bfloat16 keeps fp32 master weights that AdamW steps."""
    initial_version: int = 0
    """Policy version of the base model's weights (ignored when resuming)."""

    def __post_init__(self) -> None:
        if self.schedule.num_workers != 1:
            raise ValueError(
                f"ScheduleConfig.num_workers={self.schedule.num_workers}: TorchBackend is a single process; "
                "use num_workers=1 (or a distributed backend)"
            )


class TorchBackend:
    """Implements `trainer.backends.base.Backend` with transformers + torch.optim.AdamW."""

    def __init__(self, config: TorchBackendConfig) -> None:
        self.config = config
        self.model: torch.nn.Module | None = None
        self.reference: torch.nn.Module | None = None
        self.optimizer: torch.optim.AdamW | None = None
        self.master: MasterWeights | None = None
        self.step = 0
        self.optimizer_updates = 0
        self._version = config.initial_version
        self._weights_path = Path(config.model_path)
        self._pad_token_id = 0

    @property
    def policy_version(self) -> int:
        """Version of the current weights."""
        return self._version

    def load(self) -> None:
        """Loads the base model, or the checkpoint in `resume_from` with its optimizer state, step and version."""
        resume = self.config.resume_from
        meta = checkpoints.read_meta(resume) if resume is not None else None
        self._weights_path = Path(resume) if resume is not None else Path(self.config.model_path)
        self.model = self._load_model(self._weights_path)
        check_plain_output_head(self.model.config)
        self.model.requires_grad_(True)
        config = self.model.config
        self._pad_token_id = int(config.pad_token_id if config.pad_token_id is not None else 0)
        opt = self.config.optimizer
        self.master = MasterWeights(self.model) if self.config.dtype != "float32" else None
        warn_if_emulated_bf16(self.config.dtype, "the torch backend (backend.torch.dtype)")
        stepped = self.master.params if self.master is not None else self.model.parameters()
        self.optimizer = torch.optim.AdamW(
            stepped, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay
        )
        if meta is not None:
            self.optimizer.load_state_dict(checkpoints.load_optimizer_state(resume))
            master_state = checkpoints.load_master_weights(resume)
            if self.master is not None and master_state is not None:
                self.master.load_state_dict(master_state)
            self.step, self.optimizer_updates, self._version = meta.step, meta.optimizer_updates, meta.policy_version
        if self.config.loss.kl_coef:
            self.reference = self._load_model(Path(self.config.model_path)).requires_grad_(False)

    def _load_model(self, path: Path) -> torch.nn.Module:
        dtype = getattr(torch, self.config.dtype)
        return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()

    def train_step(self, batch: TrainBatch) -> Mapping[str, float]:
        """Schedules the batch, applies its optimizer updates, and returns averaged metrics."""
        if self.model is None or self.optimizer is None:
            raise RuntimeError("TorchBackend.train_step before load(); call load() first")
        if not batch.samples:
            raise ValueError("TrainBatch has no samples; skip the step when nothing is left to train on")
        started = time.perf_counter()
        plan = schedule(batch.samples, self.config.schedule)
        prepared = [self._update_inputs(batch, update) for update in plan.updates]
        meter = OffPolicyMeter(self._version)
        proximal = self._recompute(prepared, meter) if self.config.loss.off_policy.recompute_behaviour else None
        per_update = [
            self._update(denominators, inputs, None if proximal is None else proximal[index],
                         meter if proximal is None and index == 0 else None)
            for index, (denominators, inputs) in enumerate(prepared)
        ]
        elapsed_s = time.perf_counter() - started
        self.step += 1
        self._version += 1
        metrics = _mean_metrics(per_update)
        tokens = sum(m["train/tokens"] for m in per_update)
        trainable = sum(m["train/trainable_tokens"] for m in per_update)
        metrics.update(plan.metrics)
        metrics.update(meter.metrics(trainable))
        metrics.update(
            {
                "train/tokens": tokens,
                "train/trainable_tokens": trainable,
                "train/step_s": elapsed_s,
                "train/tokens_per_s": tokens / elapsed_s,
                "train/trainable_tokens_per_s": trainable / elapsed_s,
                "train/policy_version": float(self._version),
                "train/step": float(self.step),
                "train/optimizer_updates": float(self.optimizer_updates),
            }
        )
        return metrics

    def batch_gradient(self, batch: TrainBatch) -> torch.Tensor:
        """The gradient of the whole batch's loss at the current weights, flattened (float32), as one optimizer update
        of it would accumulate, without updating: for comparing what configurations (advantage level, loss
        aggregation) ask of the same batch."""
        if self.model is None:
            raise RuntimeError("TorchBackend.batch_gradient before load(); call load() first")
        whole = dataclasses.replace(self.config.schedule, num_updates=1)
        (update,) = schedule(batch.samples, whole).updates
        _, inputs = self._update_inputs(batch, update)
        self.model.zero_grad(set_to_none=True)
        for micro_batch in inputs:
            self._accumulate(micro_batch, micro_batch.loss, None)
        grads = [p.grad.detach().float().flatten() if p.grad is not None else torch.zeros(p.numel())
                 for p in self.model.parameters()]
        self.model.zero_grad(set_to_none=True)
        return torch.cat(grads)

    def _update_inputs(self, batch: TrainBatch, update: UpdatePlan) -> tuple[LossDenominators, list[ModelInputs]]:
        """One update's denominators and the model inputs of its micro-batches (versions and sequence ids added)."""
        indices = [seq.sample_index for worker in update.workers for mb in worker.micro_batches for seq in mb.sequences]
        denominators = LossDenominators.from_sequences(
            [batch.samples[i].rollout_id for i in indices], [batch.samples[i].num_trainable_tokens for i in indices]
        )
        inputs = []
        for worker in update.workers:
            for micro_batch in worker.micro_batches:
                built = build_model_inputs(
                    batch.samples,
                    batch.advantages_S,
                    micro_batch,
                    layout=self.config.schedule.layout,
                    denominators=denominators,
                    agg_mode=self.config.loss.agg_mode,
                    pad_token_id=self._pad_token_id,
                )
                members = [batch.samples[seq.sample_index] for seq in micro_batch.sequences]
                inputs.append(_with_target_layout(built, members))
        return denominators, inputs

    def _recompute(self, prepared: list[tuple[LossDenominators, list[ModelInputs]]],
                   meter: OffPolicyMeter) -> list[list[torch.Tensor]]:
        """Decoupled PPO: every micro-batch's logprobs under the current weights (no grad), measured into `meter`."""
        assert self.model is not None
        proximal = []
        with torch.no_grad():
            for _, inputs in prepared:
                logprobs = [token_logprobs(self.model, mb).logprobs_N.detach() for mb in inputs]
                for mb, logprobs_N in zip(inputs, logprobs, strict=True):
                    meter.add(logprobs_N, mb.loss.old_logprobs_T, mb.loss.policy_versions_T)
                proximal.append(logprobs)
        return proximal

    def _update(self, denominators: LossDenominators, inputs: list[ModelInputs],
                proximal: list[torch.Tensor] | None, meter: OffPolicyMeter | None) -> dict[str, float]:
        """One optimizer update: gradient accumulation over its micro-batches, clipping, AdamW."""
        assert self.model is not None and self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)
        sums: dict[str, float] = {"train/tokens": 0.0, "train/trainable_tokens": float(denominators.tokens)}
        for index, micro_batch in enumerate(inputs):
            loss_batch = micro_batch.loss
            if proximal is not None:
                loss_batch = dataclasses.replace(
                    loss_batch, old_logprobs_T=proximal[index], behaviour_logprobs_T=loss_batch.old_logprobs_T
                )
            for key, value in self._accumulate(micro_batch, loss_batch, meter).items():
                sums[key] = sums.get(key, 0.0) + value
            sums["train/tokens"] += micro_batch.num_tokens
        if denominators.tokens == 0:
            return {**sums, "train/skipped_update_fraction": 1.0}
        return {**sums, **self._optimizer_step(), "train/skipped_update_fraction": 0.0}

    def _accumulate(self, inputs: ModelInputs, loss_batch: LossBatch,
                    meter: OffPolicyMeter | None) -> Mapping[str, float]:
        """Backpropagates one micro-batch's loss share into the gradients; returns its metric shares.

        `meter`: measure the recorded logprobs against these (still the step's starting weights)."""
        assert self.model is not None
        if self.reference is not None:
            with torch.inference_mode():
                ref_N = token_logprobs(self.reference, inputs).logprobs_N
            loss_batch = dataclasses.replace(loss_batch, ref_logprobs_T=ref_N.clone())
        if loss_batch.weights_T.numel() == 0:
            return {}
        computed = token_logprobs(self.model, inputs, entropy_grad=bool(self.config.loss.entropy_coef))
        if meter is not None:
            meter.add(computed.logprobs_N, loss_batch.old_logprobs_T, loss_batch.policy_versions_T)
        output = policy_loss(computed.logprobs_N, loss_batch, self.config.loss, computed.entropy_N)
        output.loss.backward()
        if self.master is not None:
            self.master.accumulate_grads()
        return output.metrics

    def _optimizer_step(self) -> dict[str, float]:
        assert self.model is not None and self.optimizer is not None
        opt = self.config.optimizer
        max_norm = opt.max_grad_norm if opt.max_grad_norm is not None else float("inf")
        stepped = self.master.params if self.master is not None else list(self.model.parameters())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(stepped, max_norm))
        if not torch.isfinite(torch.tensor(grad_norm)):
            raise FloatingPointError(
                f"gradient norm is {grad_norm} at optimizer update {self.optimizer_updates}; lower the learning "
                "rate or check the batch's logprobs and advantages for extreme values"
            )
        lr = warmup_lr(opt.lr, self.optimizer_updates, opt.warmup_updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        if self.master is not None:
            self.master.copy_to_model()
        self.optimizer_updates += 1
        return {"train/grad_norm": grad_norm, "train/lr": lr}

    def save_checkpoint(self, directory: Path) -> tuple[Path, int]:
        """Writes `directory/step-NNNNNN` (weights, tokenizer, optimizer, version); returns (path, version)."""
        if self.model is None:
            raise RuntimeError("TorchBackend.save_checkpoint before load(); call load() first")
        meta = checkpoints.meta_now(self._version, self.step, self.optimizer_updates, self.config.model_path)
        master = self.master.state_dict() if self.master is not None else None
        path = checkpoints.save_checkpoint(Path(directory), self.model, self.optimizer, meta, self._weights_path,
                                           master)
        return path, self._version


def _with_target_layout(inputs: ModelInputs, members: list[Sample]) -> ModelInputs:
    """`inputs` with each trainable token's policy version and sequence in its loss batch."""
    versions_N, sequence_ids_N = target_layout(members)
    if versions_N.shape != inputs.loss.old_logprobs_T.shape:
        raise ValueError(
            f"the micro-batch has {inputs.loss.old_logprobs_T.numel()} loss targets but its samples' loss masks have "
            f"{versions_N.numel()} trainable tokens; build_model_inputs must keep exactly the loss-mask tokens"
        )
    loss = dataclasses.replace(inputs.loss, policy_versions_T=versions_N, sequence_ids_T=sequence_ids_N)
    return dataclasses.replace(inputs, loss=loss)


def _mean_metrics(per_update: list[dict[str, float]]) -> dict[str, float]:
    """Each metric averaged over the updates that report it (grad_norm and lr only exist for real steps)."""
    keys = {key for metrics in per_update for key in metrics}
    means = {}
    for key in sorted(keys):
        values = [metrics[key] for metrics in per_update if key in metrics]
        means[key] = sum(values) / len(values)
    return means
