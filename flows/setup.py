"""Pure builders from a `RunConfig`: the run's name and folders, the backend, the services, the checkpoint store.

Nothing here starts a process or touches the network; the flow applies what these return.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from flows.config import RunConfig
from flows.run_processes import ProcessSettings
from rollouts.feed import FeedConfig
from rollouts.recipe import recipe_hooks
from rollouts.registry import get_recipe
from rollouts.task_mix import TaskMix, mix_stream, plan_mix
from storage.checkpoint_store import CheckpointStore
from storage.directory_store import DirectoryStore, directory_store
from storage.s3_store import S3Endpoint
from trainer.backends.base import Backend
from trainer.checkpoints import model_dir
from trainer.loop_state import LoopState


@dataclass(frozen=True)
class RunPlan:
    """Where a run lives and where it starts from."""

    name: str
    """The run's name (also the rollout id prefix and the checkpoint store key)."""
    run_dir: Path
    """The run's local folder: gateway database, logs, working directories, local checkpoints."""
    base_model: Path
    """The base policy's HF directory (the KL reference and the tokenizer source)."""
    start_model: Path
    """The weights the engine starts with: the base model, or the checkpoint resumed from."""
    state: LoopState
    """Where the loop starts (iteration 0 for a fresh run)."""
    resumed_from: Path | None = None
    """The downloaded checkpoint when resuming."""

    @property
    def checkpoint_root(self) -> Path:
        """Local checkpoints (the engine loads them from here)."""
        return self.run_dir / "checkpoints"


def run_name(config: RunConfig, now_s: float | None = None, prefix: str | None = None) -> str:
    """The configured name, or `{prefix}-{UTC timestamp}` (prefix: the recipe, `_` as `-`, unless given)."""
    if config.name:
        return config.name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now_s if now_s is not None else time.time()))
    return f"{prefix or config.recipe.replace('_', '-')}-{stamp}"


def run_folder(config: RunConfig, name: str) -> Path:
    """The local folder of run `name`: under work_dir (relative: the project root)."""
    return config.resolve(config.work_dir) / name


def fresh_plan(config: RunConfig, name: str, base_model: Path, policy_version: int = 0) -> RunPlan:
    """A run that starts from `base_model`, whose weights are `policy_version` (0: the base policy; a checkpoint's
    version when a flow serves one without training)."""
    state = LoopState(run_name=name, iteration=0, next_task=0, policy_version=policy_version)
    return RunPlan(name, run_folder(config, name), base_model, base_model, state)


def resumed_plan(plan: RunPlan, checkpoint: Path, state: LoopState) -> RunPlan:
    """The same run continuing from a downloaded checkpoint."""
    return RunPlan(plan.name, plan.run_dir, plan.base_model, model_dir(checkpoint), state, checkpoint)


def checkpoint_store(config: RunConfig) -> CheckpointStore:
    """The run checkpoints on the store at checkpoints.store."""
    return CheckpointStore(store_at(config, config.checkpoints.store, "checkpoints.store"))


def splits_store(config: RunConfig, root: str) -> DirectoryStore:
    """The SWE splits' store at `root`."""
    return store_at(config, root, "splits_store")


def store_at(config: RunConfig, root: str, setting: str) -> DirectoryStore:
    """The directory store at `root`, the value of `setting`: relative file:// roots resolve against the project root;
    s3:// roots use the endpoint settings (checkpoints.s3_endpoint or $HARNESSRL_S3_*)."""
    if root.startswith("file://"):
        return directory_store(local_root(config, root))
    return directory_store(root, s3_endpoint(config, f"{setting}={root!r}"))


def local_root(config: RunConfig, root: str) -> str:
    """A file:// store root with a relative path resolved against the project root."""
    return config.resolve(Path(root.removeprefix("file://"))).as_uri()


def s3_endpoint(config: RunConfig, what: str) -> S3Endpoint:
    """The S3 server of the run's object stores: checkpoints.s3_endpoint (or $HARNESSRL_S3_ENDPOINT) and the keys in
    $HARNESSRL_S3_ACCESS_KEY / $HARNESSRL_S3_SECRET_KEY; `what` names the setting that needs it in the error."""
    endpoint = config.checkpoints.s3_endpoint or os.environ.get("HARNESSRL_S3_ENDPOINT")
    access, secret = os.environ.get("HARNESSRL_S3_ACCESS_KEY"), os.environ.get("HARNESSRL_S3_SECRET_KEY")
    if not (endpoint and access and secret):
        raise ValueError(f"{what} is on S3: set checkpoints.s3_endpoint (or $HARNESSRL_S3_ENDPOINT) and "
                         "$HARNESSRL_S3_ACCESS_KEY / $HARNESSRL_S3_SECRET_KEY")
    return S3Endpoint(endpoint, access, secret, secure=config.checkpoints.s3_secure)


def build_backend(config: RunConfig, plan: RunPlan) -> Backend:
    """The configured training backend (not loaded yet): the backend.* sections as they are, plus the run's model."""
    b = config.backend
    run_given = {"model_path": plan.base_model, "resume_from": plan.resumed_from, "optimizer": b.optimizer,
                 "loss": b.loss}
    if b.kind == "verl":
        from trainer.backends.verl import VerlBackend, VerlBackendConfig

        data_parallel = b.verl.n_gpus_per_node * b.verl.nnodes
        return VerlBackend(VerlBackendConfig(**run_given, schedule=replace(b.schedule, num_workers=data_parallel),
                                             **b.verl.model_dump()))
    from trainer.backends.torch import TorchBackend, TorchBackendConfig

    return TorchBackend(TorchBackendConfig(**run_given, schedule=b.schedule, **b.torch.model_dump()))


def process_settings(config: RunConfig, plan: RunPlan, pin_recipe: bool = True) -> ProcessSettings:
    """What `RunProcesses` starts for this run. `pin_recipe`: the controller runs every rollout with the config's
    recipe (`--recipe`); False when each rollout's input names its own recipe (evaluation mixes swe and swe_bench)."""
    c = config.controller
    controller_args = ("--runner", c.runner, "--concurrency", str(c.concurrency),
                       "--harness-timeout-s", str(c.harness_timeout_s))
    if pin_recipe:
        controller_args += ("--recipe", config.recipe)
    return ProcessSettings(run_dir=plan.run_dir, model_path=plan.start_model, policy_version=plan.state.policy_version,
                           model_name=config.gateway.model_name, engine=config.engine, gateway_url=config.gateway.url,
                           start_controller=c.start, controller_args=controller_args,
                           sampling=config.gateway.sampling,
                           recorded_turns=recorded_turns(config))


def recorded_turns(config: RunConfig) -> bool:
    """Whether the run's gateway gives the engine the recorded tokens of re-sent turns: the profile's
    `gateway.recorded_turns`, else the recipe's choice (`RecipeHooks.recorded_turns`)."""
    chosen = config.gateway.recorded_turns
    return recipe_hooks(get_recipe(config.recipe)).recorded_turns if chosen is None else chosen


def feed_config(config: RunConfig, plan: RunPlan, mix: TaskMix | None = None) -> FeedConfig:
    """How the training feed forms groups (`mix`: each batch takes its quota of every stratum)."""
    r = config.rollout
    return FeedConfig(r.group_size, f"{plan.name}-train", max_attempts=r.max_attempts,
                      task_overrides=r.task_overrides or None, mix=mix)


def task_mix(config: RunConfig, rows: Sequence[dict]) -> TaskMix:
    """The training rows' constant mix per batch of `rollout.batch_groups` groups, stratified by `level` (the SWE
    ladder's; rows without it are one stratum): the same composition every iteration (`rollouts/task_mix.py`)."""
    return plan_mix(rows, config.rollout.batch_groups)


def in_flight_target(config: RunConfig, groups_still_needed: int | None = None) -> int:
    """Groups kept in flight: one batch for the sync schedule, `max_inflight_groups` for the async one; never more
    than `groups_still_needed` (what the run's remaining draws take beyond the groups already complete), so the last
    iterations start no group that no iteration will train on (nor spend the CPU of its harnesses)."""
    r = config.rollout
    target = r.batch_groups if r.schedule == "sync" else r.max_inflight_groups
    return target if groups_still_needed is None else max(min(target, groups_still_needed), 0)


def task_stream(rows: Sequence[dict], start: int, reopen: Sequence[int] = (),
                mix: TaskMix | None = None) -> Iterator[tuple[int, dict]]:
    """(index, task): first the `reopen` indices (groups a resumed run had open), then from `start` on, cycling
    through the rows (index keeps counting: ids stay unique); with `mix`, each block of a batch's indices holds
    every stratum's quota (`rollouts.task_mix.mix_stream`)."""
    if not rows:
        raise ValueError("no training tasks: check data.source and data.train_tasks")
    if mix is not None:
        yield from mix_stream(rows, mix, start, reopen)
        return
    for index in itertools.chain(reopen, itertools.count(start)):
        yield index, rows[index % len(rows)]


def validation_due(config: RunConfig, iteration: int) -> bool:
    """Validate after this (1-based) iteration: every `val_every`, and always after the last."""
    a = config.algorithm
    if config.data.val_tasks == 0:
        return False
    return iteration == a.iterations or (a.val_every > 0 and iteration % a.val_every == 0)


def upload_due(config: RunConfig, updates: int, iteration: int) -> bool:
    """Upload the checkpoint after this update: every `checkpoints.every` updates, and after the last iteration."""
    return updates % config.checkpoints.every == 0 or iteration == config.algorithm.iterations
