"""`RolloutFeed`: keeps groups of rollouts in flight through the gateway and hands back the complete ones.

The feed creates a group of n rollouts per task (ids `{prefix}-{group index}-{member}`: deterministic, so re-creating
after a crash is idempotent), follows the gateway's finished-rollouts cursor with long polls, and returns groups once
every member is terminal. It knows nothing of training: the loop decides how many groups to keep in flight (the
batch for the synchronous schedule, more for the asynchronous one) and how many complete groups to take. Its data
position for a resume is `next_task` plus `open_tasks` (groups submitted but not taken: in flight or complete).
`val_pass` is the one-pass use (validation, difficulty probes, evaluation): every task once, unfinished ones listed.
With `FeedConfig.sampling_seed` every rollout is created seeded (`rollout_sampling_seed`: from the run's seed, the
task's id and the member's number), so the gateway seeds each of its calls and the same weights give the same
answers on the same task, pass after pass (seeded validation: step-to-step differences are the policy's).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from gateway.client import GatewayAPIError
from gateway.client_roles import FeedClient
from gateway.records import Event, Rollout, RolloutMode, RolloutSpec
from rollouts.groups import FinishedGroup, PendingGroup, graded_tamper
from rollouts.infra_rate import needs_events
from rollouts.task_mix import TaskMix, stratum_of, take_by_quota

log = logging.getLogger(__name__)


def transient_read_error(error: BaseException) -> bool:
    """Whether a failed read of the gateway may pass on another try: a timeout or broken connection, or a 5xx."""
    if isinstance(error, GatewayAPIError):
        return error.status >= 500
    return isinstance(error, httpx.TransportError | OSError)


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
    fetch_calls: bool = True
    """Fetch each member's recorded calls (final attempt) when its group completes; off where only rewards count."""
    fetch_grades: bool = True
    """Read each graded member's reward event for the grader's `tamper` flag (`FinishedGroup.tampered`)."""
    sampling_seed: int | None = None
    """Seeds every rollout (`rollout_sampling_seed` of this, the task's id and the member): the gateway seeds each
    call from it, so a pass over the same tasks with the same weights gives the same answers; None: unseeded."""
    mix: TaskMix | None = None
    """The constant per-batch task mix (`rollouts/task_mix.py`): a take of a whole number of batches holds each
    stratum's quota (its earliest complete groups), and waiting for it waits for those; None: completion order."""

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size={self.group_size} must be >= 1 (rollouts per task)")


def rollout_sampling_seed(run_seed: int, task_id: str, member: int) -> int:
    """The sampling seed of member `member` of the group of task `task_id` under `run_seed` (63 bits of a hash):
    the same in every pass and every run with that seed, distinct between a group's members."""
    digest = hashlib.blake2b(f"{run_seed}:{task_id}:{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class RolloutFeed:
    """Submits groups and collects complete ones; `next_task` and `open_tasks` are the data position of a resume."""

    def __init__(self, client: FeedClient, config: FeedConfig, tasks: Iterator[tuple[int, dict]],
                 clock: Callable[[], float] = time.monotonic, next_task: int = 0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._sleep = sleep
        self.config = config
        self._tasks = tasks
        self._unsent: list[tuple[int, dict]] = []
        self._clock = clock
        self._pending: dict[str, PendingGroup] = {}
        self._complete: list[FinishedGroup] = []
        self._index: dict[str, int] = {}
        self._cursor = 0
        self.next_task = next_task
        self._arrived: list[Rollout] = []  # finished members read since `take_finished`
        self._arrived_events: dict[str, list[Event]] = {}  # their events, for those with an infra attempt

    @property
    def in_flight(self) -> int:
        """Groups submitted and not yet complete."""
        return len(self._pending)

    @property
    def ready(self) -> int:
        """Complete groups not yet taken."""
        return len(self._complete)

    @property
    def open_tasks(self) -> list[int]:
        """Task indices of the groups submitted and not taken yet (a resume submits them again first)."""
        return sorted(self._index.values())

    def _take_positions(self, groups: int) -> list[int] | None:
        """Positions in the complete groups of what `take(groups)` takes; None while they are not ready. With a mix
        and a whole number of batches: each stratum's quota, earliest first; otherwise the earliest `groups`."""
        mix = self.config.mix
        if mix is not None and groups > 0 and groups % mix.batch_groups == 0:
            strata = [stratum_of(group.task, mix.field) for group in self._complete]
            return take_by_quota(strata, mix.quotas, groups // mix.batch_groups)
        return list(range(groups)) if self.ready >= groups else None

    def submit(self, groups: int, policy_version: int) -> int:
        """Creates up to `groups` new groups (fewer when the tasks run out); returns how many. When the gateway
        refuses or fails, nothing is recorded and the same tasks are submitted by the next call."""
        items = [item for item in (self._next_item() for _ in range(groups)) if item is not None]
        specs = [spec for index, task in items for spec in self._specs(index, task)]
        try:
            if specs:  # the keys it answers are attempt 0's, which no harness runs: a claim returns each attempt's
                self._client.create_rollouts(specs)  # key to the controller (`ClaimedRollout`); none is kept here
        except BaseException:
            self._unsent = items + self._unsent
            raise
        for index, task in items:
            self._record(index, task, policy_version)
        return len(items)

    def _next_item(self) -> tuple[int, dict] | None:
        return self._unsent.pop(0) if self._unsent else next(self._tasks, None)

    def _group_id(self, index: int) -> str:
        return f"{self.config.id_prefix}-{index}"

    def _task_input(self, task: dict) -> dict:
        return {**task, **(self.config.task_overrides or {})}

    def _specs(self, index: int, task: dict) -> list[RolloutSpec]:
        group_id = self._group_id(index)
        return [RolloutSpec(id=f"{group_id}-{k}", group_id=group_id, input=self._task_input(task),
                            mode=self.config.mode, max_attempts=self.config.max_attempts,
                            sampling_seed=self._seed(index, task, k))
                for k in range(self.config.group_size)]

    def _seed(self, index: int, task: dict, member: int) -> int | None:
        seed = self.config.sampling_seed
        return None if seed is None else rollout_sampling_seed(seed, str(task.get("id", index)), member)

    def _record(self, index: int, task: dict, policy_version: int) -> None:
        group_id = self._group_id(index)
        ids = tuple(f"{group_id}-{k}" for k in range(self.config.group_size))
        self._pending[group_id] = PendingGroup(group_id, self._task_input(task), ids, policy_version)
        self._index[group_id] = index
        self.next_task = max(self.next_task, index + 1)

    def fill(self, target_in_flight: int, policy_version: int) -> int:
        """Submits groups until `target_in_flight` are in flight (ready groups not counted); returns how many."""
        return self.submit(max(target_in_flight - self.in_flight, 0), policy_version)

    def poll(self, wait_s: float) -> int:
        """Reads finished rollouts (long-polling up to `wait_s`); returns how many groups became complete. All or
        nothing: when a read fails (the page, or a completed group's calls or events), the feed is as it was before
        the call (same cursor, same pending members), so the next poll reads the same rollouts again."""
        page = self._client.finished(after=self._cursor, limit=500, wait_s=wait_s)
        arrived: dict[str, dict[str, Rollout]] = {}
        for rollout in page.rollouts:
            group = self._pending.get(rollout.group_id)
            if group is None or rollout.id not in group.rollout_ids:
                continue  # another feed's rollout (validation, another run on the same gateway)
            arrived.setdefault(group.group_id, {})[rollout.id] = rollout
        updated = {group_id: replace(self._pending[group_id], finished={**self._pending[group_id].finished, **new})
                   for group_id, new in arrived.items()}
        completed = [self._finish(group) for group in updated.values() if group.complete]  # may raise: no change yet
        members = [rollout for new in arrived.values() for rollout in new.values()]
        infra_events = {r.id: self._client.list_events(r.id) for r in members if needs_events(r)}  # may raise too
        self._arrived.extend(members)
        self._arrived_events.update(infra_events)
        self._cursor = page.cursor
        self._pending.update(updated)
        for group in completed:
            del self._pending[group.group_id]
        self._complete.extend(completed)
        return len(completed)

    def _finish(self, group: PendingGroup) -> FinishedGroup:
        members = tuple(group.finished[rid] for rid in group.rollout_ids)
        calls = {r.id: tuple(self._client.calls(r.id, attempt=r.attempt)) if self.config.fetch_calls else ()
                 for r in members}
        tampered = frozenset(r.id for r in members if self.config.fetch_grades and r.reward is not None
                             and graded_tamper(r, self._client.list_events(r.id)))
        return FinishedGroup(group.group_id, group.task, members, calls, group.submitted_version, tampered)

    def wait_for(self, groups: int, timeout_s: float, poll_s: float = 5.0,
                 on_poll: Callable[[int], None] | None = None) -> None:
        """Polls until `groups` complete groups are ready; TimeoutError naming the counts after `timeout_s`. A poll
        that fails on a transient read error (a timeout or lost connection, a gateway 5xx: `transient_read_error`)
        is logged and tried again after `poll_s` (a busy gateway on a loaded machine is slow, not gone); any other
        error is raised."""
        deadline = self._clock() + timeout_s
        while self._take_positions(groups) is None:
            if not self._pending:
                mix = "" if self.config.mix is None else f" (by the task mix {dict(self.config.mix.quotas)})"
                raise RuntimeError(f"waiting for {groups} complete groups{mix} but only {self.ready} are ready and "
                                   "none is in flight; submit more groups first (are the tasks exhausted?)")
            left_s = deadline - self._clock()
            if left_s <= 0:
                raise TimeoutError(f"{self.ready} of {groups} groups complete after {timeout_s:.0f} s with "
                                   f"{self.in_flight} in flight; is a controller running against this gateway? "
                                   "raise the rollout timeout for slow harnesses")
            try:
                self.poll(min(poll_s, left_s))
            except Exception as error:
                if not transient_read_error(error):
                    raise
                log.warning("reading finished rollouts failed (%s: %s); trying again in %.0f s",
                            type(error).__name__, error, min(poll_s, left_s))
                self._sleep(min(poll_s, max(deadline - self._clock(), 0.0)))
            if on_poll is not None:
                on_poll(self.ready)

    def take_finished(self) -> tuple[list[Rollout], dict[str, list[Event]]]:
        """Every member rollout read as finished since the last call (in complete groups or not, taken or not,
        retried or failed as infra: the ones the trainer never sees too) and the events of those with an infra
        attempt: what `rollouts.infra_rate.infra_metrics` counts."""
        taken = (self._arrived, self._arrived_events)
        self._arrived, self._arrived_events = [], {}
        return taken

    def take(self, groups: int) -> list[FinishedGroup]:
        """The `groups` earliest completed groups (fewer if fewer are ready), removed from the feed; with a task mix
        and a whole number of batches, each stratum's quota of them (`FeedConfig.mix`), or its earliest ones when
        some stratum is short."""
        positions = self._take_positions(groups)
        chosen = set(range(min(groups, self.ready)) if positions is None else positions)
        taken = [group for position, group in enumerate(self._complete) if position in chosen]
        self._complete = [group for position, group in enumerate(self._complete) if position not in chosen]
        for group in taken:
            del self._index[group.group_id]
        return taken


def val_pass(client: FeedClient, config: FeedConfig, tasks: Sequence[dict], policy_version: int, timeout_s: float,
             on_poll: Callable[[int], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> tuple[list[FinishedGroup], list[str]]:
    """Every task once (a group of `config.group_size` each): the groups finished within `timeout_s` and the ids of
    the tasks whose group did not finish (listed, not raised: one slow task does not sink a whole pass)."""
    feed = RolloutFeed(client, config, iter(enumerate(tasks)), clock=clock)
    submitted = feed.submit(len(tasks), policy_version)
    try:
        feed.wait_for(submitted, timeout_s, poll_s=min(5.0, timeout_s), on_poll=on_poll)
    except TimeoutError as error:
        log.warning("%s; the unfinished tasks are listed apart", error)
    groups = feed.take(feed.ready)
    finished = {group.group_id for group in groups}
    unfinished = [str(task.get("id", index)) for index, task in enumerate(tasks)
                  if f"{config.id_prefix}-{index}" not in finished]
    return groups, unfinished
