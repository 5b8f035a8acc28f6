"""Prefect tasks of the training stage: load the backend, build a batch, update collocated, publish checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.base import Engine
from flows.prefect_tasks.retries import io_failure
from gateway.client_roles import AdminClient
from storage.checkpoint_layout import check_numbering
from storage.checkpoint_store import CheckpointStore
from trainer.advantages import AdvantageConfig
from trainer.backends.base import Backend
from trainer.checkpoints import prune_checkpoints, step_root
from trainer.collocation import UpdateResult, collocated_update
from trainer.loop_state import LoopState, read_loop_state, save_loop_state
from trainer.merge_failures import Decode
from trainer.prepared_step import PreparedStep, prepare_step
from trainer.rollout_groups import FinishedGroup, StalenessSplit, drop_stale
from trainer.samples import SampleLimits


@task(name="load-backend", cache_policy=NO_CACHE, persist_result=False)
def load_backend(backend: Backend) -> Backend:
    """Loads the model (and optimizer state when resuming) into the backend."""
    backend.load()
    return backend


def token_decoder(model_dir: Path) -> Decode:
    """The policy tokenizer's decode (merge failures are classified with it: retokenization or chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir)).decode


@task(name="build-batch", cache_policy=NO_CACHE, persist_result=False)
def build_batch(groups: Sequence[FinishedGroup], policy_version: int, max_version_lag: int,
                advantage: AdvantageConfig, limits: SampleLimits, pass_threshold: float,
                decode: Decode | None = None,
                format_shares: Callable[[Sequence[FinishedGroup]], Mapping[str, float]] | None = None,
                ) -> tuple[PreparedStep, StalenessSplit]:
    """Drops too-stale rollouts, then builds samples and advantages of the rest (`format_shares` reads the kept
    groups' shares of turns in the harness's action format, for `advantage.format_reward`)."""
    split = drop_stale(groups, policy_version, max_version_lag)
    shares = format_shares(split.kept) if format_shares is not None else None
    return prepare_step(split.kept, advantage, limits, pass_threshold, decode, shares), split


@task(name="update-policy", cache_policy=NO_CACHE, persist_result=False)
def update_policy(gateway: AdminClient, engine: Engine, backend: Backend, prepared: PreparedStep,
                  checkpoint_root: Path, model_name: str, drain_timeout_s: float, keep_local: int) -> UpdateResult:
    """One collocated update (pause, drain, sleep, train, save, refit, wake, resume); old local checkpoints go."""
    assert prepared.batch is not None, "update_policy needs a batch with gradient signal"
    result = collocated_update(gateway, engine, backend, prepared.batch, checkpoint_root, model_name,
                               drain_timeout_s)
    prune_checkpoints(checkpoint_root, keep_local)
    return result


@task(name="publish-checkpoint", cache_policy=NO_CACHE, persist_result=False,
      retries=3, retry_condition_fn=io_failure, retry_delay_seconds=10)
def publish_checkpoint(store: CheckpointStore, checkpoint: Path, run_name: str, state: LoopState) -> str:
    """Saves the loop state in the checkpoint's step directory, uploads that directory under the same name (its policy
    version, `state.policy_version`), returns its URI."""
    root = step_root(checkpoint)
    check_numbering(str(root), root.name, state.policy_version)
    save_loop_state(root, state)
    return store.upload(root, run_name, state.policy_version)


@task(name="find-resume-point", cache_policy=NO_CACHE, persist_result=False,
      retries=2, retry_condition_fn=io_failure, retry_delay_seconds=5)
def find_resume_point(store: CheckpointStore, run_name: str, local_dir: Path) -> tuple[Path, LoopState] | None:
    """The run's last uploaded checkpoint, downloaded, with its loop state (None: a fresh run)."""
    uri = store.latest(run_name)
    if uri is None:
        return None
    path = store.download(uri, local_dir)
    state = read_loop_state(path)
    if state is None:
        raise RuntimeError(f"checkpoint {uri} has no loop state; it was not written by a training flow, so the run "
                           f"{run_name!r} cannot resume from it: pick another run name")
    check_numbering(uri, path.name, state.policy_version)
    return path, state
