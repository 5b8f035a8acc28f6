"""`VerlBackend`: policy updates on verl's FSDP training workers (GPU clusters), pinned to verl 0.9.1.

verl 0.9 trains through its model-engine workers: a Ray worker group of `verl.workers.engine_workers.TrainingWorker`
(one per GPU, FSDP2 engine) takes a TensorDict batch, splits it into micro-batches under a token budget, calls the
loss function it was given per micro-batch, and takes one optimizer step per mini-batch. A training step here:

1. schedules the batch (`trainer.scheduling`, one worker per data-parallel rank, rollout-atomic updates);
2. for each update, lays its samples out as verl rows with global-denominator token weights
   (`trainer.backends.verl_batch`) and converts them to verl's DataProto, then to its no-padding TensorDict;
3. with `loss.off_policy.recompute_behaviour` (decoupled PPO), runs verl's forward-only pass (`infer_batch`,
   `compute_loss=False`, at the rows' temperature) over every update's rows BEFORE the first optimizer update, so
   every recomputation is at the step's starting weights, as in the torch backend; each update's rows then carry
   the recomputation as `old_log_probs` (the proximal policy) and the recorded logprobs as `rollout_log_probs`
   (`trainer.backends.verl_batch.with_recomputed_logprobs`), which `verl_loss` turns into truncated
   pi_prox / pi_behav weights;
4. sends each update as ONE mini-batch (one epoch, no shuffle) to `train_mini_batch`, so verl's optimizer step is
   exactly our update and the loss (`trainer.backends.verl_loss.actor_loss`, our policy loss from verl's registry) is
   whole.

The `off_policy/lag{k}_...` metrics compare the recorded logprobs with the trainer's at the step's starting weights:
the recomputation of every update when there is one (measured here, `trainer.off_policy_metrics.OffPolicyMeter`, as
the torch backend does), else the first update's own forward passes (reported by `actor_loss` on the workers).

verl's actor divides the logits by the `temperature` of the mini-batch's meta_info: it is the temperature the
update's samples were sampled at (`trainer.backends.verl_batch.verl_temperature`: one per update, no top-k, min-p or
top-p filtering, else a clear error), so the new logprobs are of the distribution the recorded (old) ones are of.

Checkpoints are verl's (model, optimizer, extra) plus an HF directory (`huggingface/`) that engines load, with our
`harnessrl-checkpoint.json` beside the HF files. verl (and Ray) are imported only when used.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from storage.files import write_atomic
from trainer import checkpoints, off_policy_metrics
from trainer.backends.base import TrainBatch
from trainer.backends.torch import OptimizerConfig
from trainer.backends.verl_batch import VerlRows, to_verl_rows, verl_temperature, with_recomputed_logprobs
from trainer.losses import LossConfig
from trainer.off_policy_metrics import OffPolicyMeter
from trainer.scheduling import ScheduleConfig, schedule

VERL_VERSION = "0.9.1"
"""The verl release this backend is written and tested against (pyproject's `gpu` extra pins it)."""

Strategy = Literal["fsdp", "fsdp2"]
"""verl FSDP engine generation."""


@dataclass(frozen=True)
class VerlBackendConfig:
    """What to train, where, and how."""

    model_path: Path
    """HF model directory of the base policy."""
    resume_from: Path | None = None
    """A checkpoint written by this backend (its directory, holding `verl/` and `huggingface/`)."""
    n_gpus_per_node: int = 1
    """GPUs per node; one data-parallel rank each."""
    nnodes: int = 1
    """Nodes in the Ray cluster."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW settings (mapped onto verl's FSDPOptimizerConfig)."""
    loss: LossConfig = LossConfig()
    """Policy-loss settings (rollout-token-mean by default)."""
    schedule: ScheduleConfig = ScheduleConfig()
    """Micro-batch budget and updates per step; num_workers must equal the data-parallel size."""
    strategy: Strategy = "fsdp2"
    """verl's FSDP engine."""
    param_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """Compute dtype of the forward pass (master weights stay fp32)."""
    temperature: float | None = None
    """Removed (must stay unset): the temperature now comes from the samples, as the gateway recorded their calls'
    sampling; set the policy's temperature at the gateway (`sampling.temperature`, with `sampling.train: enforce`)."""
    gradient_checkpointing: bool = True
    """Recompute activations in backward (less memory)."""
    initial_version: int = 0
    """Policy version of the base weights (ignored when resuming)."""
    pad_token_id: int = 0
    """Token ID used for padding (never attended to)."""
    attn_implementation: str = "flash_attention_2"
    """HF attention of the workers' model; "sdpa" where flash-attn is not installed (packed rows stay apart)."""

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks."""
        return self.n_gpus_per_node * self.nnodes

    def __post_init__(self) -> None:
        if self.n_gpus_per_node < 1 or self.nnodes < 1:
            raise ValueError(
                f"VerlBackendConfig n_gpus_per_node={self.n_gpus_per_node}, nnodes={self.nnodes}: use positive counts"
            )
        if self.schedule.num_workers != self.dp_size:
            raise ValueError(
                f"ScheduleConfig.num_workers={self.schedule.num_workers} but verl runs {self.dp_size} data-parallel "
                f"ranks; use ScheduleConfig(num_workers={self.dp_size})"
            )
        if self.loss.kl_coef:
            raise ValueError(
                f"LossConfig.kl_coef={self.loss.kl_coef}: VerlBackend does not run a reference worker yet; use the "
                "torch backend for KL-regularised runs or set kl_coef=0 (actor_loss already applies ref_log_prob)"
            )
        if self.temperature is not None:
            raise ValueError(
                f"VerlBackendConfig.temperature={self.temperature}: this setting is removed; each update's temperature "
                "is the one its calls were sampled at (recorded by the gateway). Drop `backend.verl.temperature` and "
                "set the policy's temperature at the gateway (`sampling.temperature`, `sampling.train: enforce`)"
            )


def build_data_proto(rows: VerlRows) -> Any:
    """verl's DataProto for the rows: numeric fields as tensors, provenance as object arrays."""
    import torch
    from verl import DataProto

    tensors = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in rows.tensor_fields().items()}
    return DataProto.from_dict(tensors=tensors, non_tensors=rows.provenance_fields(), meta_info={})


def build_training_input(rows: VerlRows, *, calculate_entropy: bool) -> Any:
    """The TensorDict `TrainingWorker.train_mini_batch` takes: no-padding layout, one mini-batch, one epoch, at the
    temperature the rows' samples were sampled at."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    data = left_right_2_no_padding(build_data_proto(rows).to_tensordict())
    tu.assign_non_tensor(
        data,
        temperature=rows.temperature,
        calculate_entropy=calculate_entropy,
        global_batch_size=rows.num_rows,
        mini_batch_size=rows.num_rows,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        compute_loss=True,
    )
    return data


def build_recompute_input(rows: VerlRows) -> Any:
    """The TensorDict `TrainingWorker.infer_batch` takes to recompute the rows' logprobs (decoupled PPO): no-padding
    layout, forward only (`compute_loss=False`), at the temperature the rows' samples were sampled at."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    data = left_right_2_no_padding(build_data_proto(rows).to_tensordict())
    tu.assign_non_tensor(data, temperature=rows.temperature, calculate_entropy=False, compute_loss=False)
    return data


def recomputed_logprobs(output: Any, data: Any) -> np.ndarray:
    """[B, R] response-region logprobs from `infer_batch`'s output (`log_probs`, no-padding layout: one sequence per
    row of `data`, value t the logprob of token t + 1), as verl's trainer converts them (`no_padding_2_padding`)."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    log_probs = tu.get(output, "log_probs")
    if log_probs is None:
        raise ValueError("infer_batch returned no log_probs; the recomputation needs verl's forward-only output")
    lengths = [int(n) for n in data["attention_mask"].sum(dim=1).tolist()]
    got = [int(n) for n in log_probs.offsets().diff().tolist()] if log_probs.is_nested else None
    if (got is not None and got != lengths) or (got is None and int(log_probs.shape[0]) != sum(lengths)):
        shown = got if got is not None else f"{int(log_probs.shape[0])} tokens in all"
        raise ValueError(
            f"infer_batch returned log_probs for sequences of lengths {shown} but the rows sent have lengths "
            f"{lengths}; the forward pass must return one value per token of every row, in the rows' order"
        )
    return no_padding_2_padding(log_probs, data).detach().to(torch.float32).cpu().numpy()


def measure_recomputation(meter: OffPolicyMeter, rows: VerlRows) -> None:
    """Adds the rows' recomputed (trainer) against recorded (engine) logprobs of every trainable token to `meter`."""
    import torch

    if rows.rollout_log_probs is None:
        raise ValueError("the rows carry no recomputation; build them with verl_batch.with_recomputed_logprobs")
    mask = rows.response_mask == 1
    meter.add(
        torch.from_numpy(rows.old_log_probs[mask]),
        torch.from_numpy(rows.rollout_log_probs[mask]),
        torch.from_numpy(rows.policy_versions[mask]),
    )


def worker_config(config: VerlBackendConfig) -> Any:
    """verl's TrainingWorkerConfig for the actor (FSDP engine, AdamW, checkpoint contents incl. the HF model)."""
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, TrainingWorkerConfig

    opt = config.optimizer
    budget = config.schedule.max_tokens_per_micro_batch
    engine = FSDPEngineConfig(
        strategy=config.strategy,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=budget,
        infer_max_token_len_per_gpu=budget,
        mixed_precision={"param_dtype": config.param_dtype, "reduce_dtype": "float32", "buffer_dtype": "float32"},
        use_torch_compile=False,
    )
    optimizer = FSDPOptimizerConfig(
        lr=opt.lr,
        betas=opt.betas,
        weight_decay=opt.weight_decay,
        clip_grad=opt.max_grad_norm if opt.max_grad_norm is not None else float("inf"),
        lr_warmup_steps=opt.warmup_updates,
        override_optimizer_config={"eps": opt.eps},
    )
    model = HFModelConfig(
        path=str(config.model_path),
        enable_gradient_checkpointing=config.gradient_checkpointing,
        use_remove_padding=True,
        override_config={"attn_implementation": config.attn_implementation},
    )
    contents = ["model", "optimizer", "extra", "hf_model"]
    return TrainingWorkerConfig(
        model_type="language_model",
        model_config=model,
        engine_config=engine,
        optimizer_config=optimizer,
        checkpoint_config=CheckpointConfig(save_contents=contents, load_contents=contents[:3]),
    )


class VerlBackend:
    """Implements `trainer.backends.base.Backend` on a Ray worker group of verl TrainingWorkers."""

    def __init__(self, config: VerlBackendConfig) -> None:
        self.config = config
        self.workers: Any = None
        self.step = 0
        self.optimizer_updates = 0
        self._version = config.initial_version

    @property
    def policy_version(self) -> int:
        """Version of the current weights."""
        return self._version

    def load(self) -> None:
        """Starts the worker group (joining or starting Ray), loads the model, and resumes when asked."""
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.workers.engine_workers import TrainingWorker

        from trainer.backends.verl_loss import actor_loss

        if not ray.is_initialized():
            ray.init()
        pool = RayResourcePool(process_on_nodes=[self.config.n_gpus_per_node] * self.config.nnodes)
        worker = RayClassWithInitArgs(ray.remote(TrainingWorker), config=worker_config(self.config))
        self.workers = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=worker, device_name="cuda")
        self.workers.set_loss_fn(loss_fn=functools.partial(actor_loss, config=self.config.loss))
        self.workers.reset()
        resume = self.config.resume_from
        if resume is not None:
            meta = checkpoints.read_meta(Path(resume))
            self.workers.load_checkpoint(str(Path(resume) / "verl"), del_local_after_load=False)
            self.step, self.optimizer_updates, self._version = meta.step, meta.optimizer_updates, meta.policy_version

    def train_step(self, batch: TrainBatch) -> Mapping[str, float]:
        """Schedules the batch and runs one verl mini-batch (one optimizer step) per update."""
        if self.workers is None:
            raise RuntimeError("VerlBackend.train_step before load(); call load() first")
        if not batch.samples:
            raise ValueError("TrainBatch has no samples; skip the step when nothing is left to train on")
        verl_temperature(batch.samples)
        started = time.perf_counter()
        plan = schedule(batch.samples, self.config.schedule)
        updates = [
            to_verl_rows(
                batch.samples,
                batch.advantages_S,
                update,
                dp_size=self.config.dp_size,
                agg_mode=self.config.loss.agg_mode,
                pad_token_id=self.config.pad_token_id,
            )
            for update in plan.updates
        ]
        recompute = self.config.loss.off_policy.recompute_behaviour
        meter = OffPolicyMeter(self._version)
        if recompute:  # every update's proximal logprobs at the step's starting weights: all before the first update
            updates = [self._recompute(rows) for rows in updates]
            for rows in updates:
                measure_recomputation(meter, rows)
        per_update = [self._update(rows, measure=not recompute and index == 0) for index, rows in enumerate(updates)]
        elapsed_s = time.perf_counter() - started
        self.step += 1
        self._version += 1
        lag_prefix = off_policy_metrics.PREFIX + "lag"
        keys = sorted({key for m in per_update for key in m if not key.startswith(lag_prefix)})
        metrics = {key: float(np.mean([m[key] for m in per_update if key in m])) for key in keys}
        metrics.update(plan.metrics)
        trainable = float(sum(sample.num_trainable_tokens for sample in batch.samples))
        if recompute:
            metrics.update(meter.metrics(trainable))
        else:  # the first update runs at the step's starting weights
            raw = {key: value for key, value in per_update[0].items() if key.startswith(lag_prefix)}
            metrics.update(off_policy_metrics.finish(raw))
            if raw:
                metrics.update(off_policy_metrics.measured_fraction(raw, trainable))
        tokens = sum(sample.num_tokens for sample in batch.samples)
        metrics.update(
            {
                "train/tokens": float(tokens),
                "train/trainable_tokens": trainable,
                "train/step_s": elapsed_s,
                "train/tokens_per_s": tokens / elapsed_s,
                "train/policy_version": float(self._version),
                "train/step": float(self.step),
                "train/optimizer_updates": float(self.optimizer_updates),
            }
        )
        return metrics

    def _recompute(self, rows: VerlRows) -> VerlRows:
        """Decoupled PPO: the rows with their logprobs recomputed by the workers' forward-only pass (no update)."""
        data = build_recompute_input(rows)
        output = self.workers.infer_batch(data).get()
        return with_recomputed_logprobs(rows, recomputed_logprobs(output, data))

    def _update(self, rows: VerlRows, *, measure: bool) -> dict[str, float]:
        """One optimizer update on the workers; verl's metrics reduced to floats.

        `measure`: the workers report the `off_policy/lag` raw statistics of their forward passes (this update runs
        at the step's starting weights)."""
        from verl.utils import tensordict_utils as tu

        from trainer.backends.verl_loss import TRAINER_VERSION_KEY

        data = build_training_input(rows, calculate_entropy=bool(self.config.loss.entropy_coef))
        if measure:
            tu.assign_non_tensor(data, **{TRAINER_VERSION_KEY: self._version})  # the lag of each token (off_policy/)
        output = self.workers.train_mini_batch(data).get()
        self.optimizer_updates += 1
        return {key: _as_float(value) for key, value in tu.get(output, "metrics").items()}

    def save_checkpoint(self, directory: Path) -> tuple[Path, int]:
        """Writes `directory/step-NNNNNN/` (verl's state in `verl/`, the HF model in `verl/huggingface/`, the meta file
        at the top); returns the HF directory and the policy version."""
        if self.workers is None:
            raise RuntimeError("VerlBackend.save_checkpoint before load(); call load() first")
        root = Path(directory) / checkpoints.checkpoint_name(self._version)
        if root.exists():
            raise checkpoints.CheckpointError(f"checkpoint {root} already exists; save into another root")
        self.workers.save_checkpoint(str(root / "verl"), global_step=self.step)
        meta = checkpoints.meta_now(self._version, self.step, self.optimizer_updates, self.config.model_path)
        write_atomic(root / checkpoints.META_FILE, meta.model_dump_json(indent=2))
        return checkpoints.model_dir(root), self._version


def _as_float(value: Any) -> float:
    """A verl metric (a float, a list of per-micro-batch values, or a tensor) as one float."""
    if isinstance(value, list | tuple):
        return float(np.mean([_as_float(v) for v in value])) if value else float("nan")
    return float(value)
