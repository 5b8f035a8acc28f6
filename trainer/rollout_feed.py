"""`RolloutFeed`: keeps groups of rollouts in flight through the gateway and hands back the complete ones.

The feed creates a group of n rollouts per task (ids `{prefix}-{group index}-{member}`: deterministic, so re-creating
after a crash is idempotent), follows the gateway's finished-rollouts cursor with long polls, and returns groups once
every member is terminal. It knows nothing of training: the loop decides how many groups to keep in flight (the
batch for the synchronous schedule, more for the asynchronous one) and how many complete groups to take.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.records import CallRecord, FinishedPage, RolloutCreated, RolloutMode, RolloutSpec
from trainer.rollout_groups import FinishedGroup, PendingGroup


class FeedClient(Protocol):
    """The part of `gateway.client.GatewayClient` the feed uses."""

    def create_rollouts(self, specs: Sequence[RolloutSpec]) -> list[RolloutCreated]: ...

    def finished(self, after: int = 0, limit: int = 100, wait_s: float = 0.0) -> FinishedPage: ...

    def calls(self, rollout_id: str, attempt: int | None = None) -> list[CallRecord]: ...


@dataclass(frozen=True)
class FeedConfig:
    """How groups are formed."""

    group_size: int
    """Rollouts per task (n)."""
    id_prefix: str
    """Prefix of every rollout and group id (the run's name: unique per run)."""
    mode: RolloutMode = RolloutMode.TRAIN
    """train (logprobs forced, trained on) or val (evaluation only)."""
    max_attempts: int = 3
    """Attempts per rollout before an infra failure is final."""
    task_overrides: dict[str, Any] | None = None
    """Keys merged into every task input (e.g. max_tokens, step_limit)."""

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size={self.group_size} must be >= 1 (rollouts per task)")


class RolloutFeed:
    """Submits groups and collects complete ones; `next_task` is the data position to save for a resume."""

    def __init__(self, client: FeedClient, config: FeedConfig, tasks: Iterator[tuple[int, dict]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self.config = config
        self._tasks = tasks
        self._clock = clock
        self._pending: dict[str, PendingGroup] = {}
        self._complete: list[FinishedGroup] = []
        self._owner: dict[str, str] = {}
        self._cursor = 0
        self.next_task = 0

    @property
    def in_flight(self) -> int:
        """Groups submitted and not yet complete."""
        return len(self._pending)

    @property
    def ready(self) -> int:
        """Complete groups not yet taken."""
        return len(self._complete)

    def submit(self, groups: int, policy_version: int) -> int:
        """Creates up to `groups` new groups (fewer when the tasks run out); returns how many."""
        specs: list[RolloutSpec] = []
        for _ in range(groups):
            item = next(self._tasks, None)
            if item is None:
                break
            index, task = item
            specs += self._group_specs(index, task, policy_version)
            self.next_task = index + 1
        if specs:
            self._client.create_rollouts(specs)
        return len(specs) // self.config.group_size

    def _group_specs(self, index: int, task: dict, policy_version: int) -> list[RolloutSpec]:
        group_id = f"{self.config.id_prefix}-{index}"
        task_input = {**task, **(self.config.task_overrides or {})}
        ids = tuple(f"{group_id}-{k}" for k in range(self.config.group_size))
        self._pending[group_id] = PendingGroup(group_id, task_input, ids, policy_version)
        self._owner.update(dict.fromkeys(ids, group_id))
        return [RolloutSpec(id=rid, group_id=group_id, input=task_input, mode=self.config.mode,
                            max_attempts=self.config.max_attempts) for rid in ids]

    def fill(self, target_in_flight: int, policy_version: int) -> int:
        """Submits groups until `target_in_flight` are in flight (ready groups not counted); returns how many."""
        return self.submit(max(target_in_flight - self.in_flight, 0), policy_version)

    def poll(self, wait_s: float) -> int:
        """Reads finished rollouts (long-polling up to `wait_s`); returns how many groups became complete."""
        page = self._client.finished(after=self._cursor, limit=500, wait_s=wait_s)
        self._cursor = page.cursor
        completed = 0
        for rollout in page.rollouts:
            group_id = self._owner.pop(rollout.id, None)
            if group_id is None:
                continue  # another feed's rollout (validation, another run on the same gateway)
            group = self._pending[group_id]
            group.finished[rollout.id] = rollout
            if group.complete:
                del self._pending[group_id]
                self._complete.append(self._finish(group))
                completed += 1
        return completed

    def _finish(self, group: PendingGroup) -> FinishedGroup:
        calls = {rid: tuple(self._client.calls(rid)) for rid in group.rollout_ids}
        members = tuple(group.finished[rid] for rid in group.rollout_ids)
        return FinishedGroup(group.group_id, group.task, members, calls, group.submitted_version)

    def wait_for(self, groups: int, timeout_s: float, poll_s: float = 5.0,
                 on_poll: Callable[[int], None] | None = None) -> None:
        """Polls until `groups` complete groups are ready; TimeoutError naming the counts after `timeout_s`."""
        deadline = self._clock() + timeout_s
        while self.ready < groups:
            if not self._pending:
                raise RuntimeError(f"waiting for {groups} complete groups but only {self.ready} are ready and none "
                                   "is in flight; submit more groups first (are the tasks exhausted?)")
            left_s = deadline - self._clock()
            if left_s <= 0:
                raise TimeoutError(f"{self.ready} of {groups} groups complete after {timeout_s:.0f} s with "
                                   f"{self.in_flight} in flight; is a controller running against this gateway? "
                                   "raise the rollout timeout for slow harnesses")
            self.poll(min(poll_s, left_s))
            if on_poll is not None:
                on_poll(self.ready)

    def take(self, groups: int) -> list[FinishedGroup]:
        """The `groups` earliest completed groups (fewer if fewer are ready), removed from the feed."""
        taken, self._complete = self._complete[:groups], self._complete[groups:]
        return taken
