"""Prefect tasks of the rollout stage: keep groups in flight, wait for complete ones, run a validation pass."""

from __future__ import annotations

import time
from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE
from tqdm.auto import tqdm

from flows.prefect_tasks.retries import io_failure
from gateway.client_roles import FeedClient
from gateway.records import RolloutMode
from rollouts.feed import FeedConfig, RolloutFeed, val_pass
from rollouts.groups import FinishedGroup
from trainer.prepared_step import reward_metrics


@task(name="submit-groups", cache_policy=NO_CACHE, persist_result=False,
      retries=2, retry_condition_fn=io_failure, retry_delay_seconds=5)
def fill_in_flight(feed: RolloutFeed, target_groups: int, policy_version: int) -> int:
    """Creates groups until `target_groups` are in flight; returns how many were created."""
    return feed.fill(target_groups, policy_version)


@task(name="wait-for-groups", cache_policy=NO_CACHE, persist_result=False)
def collect_groups(feed: RolloutFeed, groups: int, timeout_s: float, label: str) -> tuple[list[FinishedGroup], float]:
    """Waits until `groups` groups are complete (a progress bar in a terminal); returns them and the wait in s."""
    started = time.perf_counter()
    with tqdm(total=groups, desc=label, unit="group", leave=False, initial=min(feed.ready, groups)) as bar:
        def advance(ready: int) -> None:
            bar.update(min(ready, groups) - bar.n)
        feed.wait_for(groups, timeout_s, on_poll=advance)
    return feed.take(groups), time.perf_counter() - started


def val_pass_with_progress(client: FeedClient, config: FeedConfig, tasks: Sequence[dict], policy_version: int,
                           timeout_s: float, unit: str, unfinished_note: str) -> tuple[list[FinishedGroup], list[str]]:
    """`rollouts.feed.val_pass` with a progress bar; prints how many tasks did not finish and `unfinished_note`
    (what happens to them)."""
    with tqdm(total=len(tasks), desc=config.id_prefix, unit=unit, leave=False) as bar:
        groups, unfinished = val_pass(client, config, tasks, policy_version, timeout_s,
                                      on_poll=lambda ready: bar.update(ready - bar.n))
    if unfinished:
        print(f"{config.id_prefix}: {len(unfinished)} {unit}s unfinished after {timeout_s:.0f} s; {unfinished_note}")
    return groups, unfinished


@task(name="validate-policy", cache_policy=NO_CACHE, persist_result=False)
def run_validation(client: FeedClient, val_rows: Sequence[dict], id_prefix: str, group_size: int,
                   policy_version: int, timeout_s: float, pass_threshold: float, max_attempts: int = 3,
                   task_overrides: dict | None = None, fetch_calls: bool = False,
                   sampling_seed: int | None = None,
                   failure_reward: float = 0.0) -> tuple[dict[str, float], list[FinishedGroup]]:
    """Every validation task in val mode (no training); returns val/ metrics (val/unfinished_tasks counts the tasks
    whose group did not finish within `timeout_s`: not fatal, and each of their rollouts counts in the means at
    `failure_reward`, so stalling on a task never raises them) and the groups (with their recorded
    calls when `fetch_calls`). `sampling_seed`: every call seeded from it and the task (`FeedConfig.sampling_seed`),
    so the same weights give the same answers. An agent failure counts at `failure_reward` (`reward_metrics`)."""
    config = FeedConfig(group_size, id_prefix, RolloutMode.VAL, max_attempts=max_attempts,
                        task_overrides=task_overrides, fetch_calls=fetch_calls, sampling_seed=sampling_seed)
    groups, unfinished = val_pass_with_progress(client, config, val_rows, policy_version, timeout_s, "task",
                                  "each of their rollouts counts as failed in the validation means")
    metrics = reward_metrics([r for g in groups for r in g.rollouts], pass_threshold, "val", failure_reward,
                             unfinished=len(unfinished) * group_size)
    return {**metrics, "val/unfinished_tasks": float(len(unfinished))}, groups
