"""Hand-built gateway records, finished groups and a fake gateway for tests of the training loop and its readers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.records import (
    CallRecord,
    Event,
    EventKind,
    FinishedPage,
    Rollout,
    RolloutCreated,
    RolloutSpec,
    RolloutState,
)
from trainer.rollout_groups import FinishedGroup

PROMPT = [1, 504, 2116]


def rollout(rollout_id: str = "r1", group_id: str = "g1", reward: float | None = 1.0, **fields: Any) -> Rollout:
    """A finished train rollout (succeeded, first attempt); any Rollout field can be overridden by keyword."""
    values: dict[str, Any] = dict(id=rollout_id, group_id=group_id, input={}, mode="train",
                                  state=RolloutState.SUCCEEDED, attempt=1, max_attempts=3, reward=reward,
                                  created_at=0.0, finished_at=1.0, finished_seq=1)
    return Rollout(**{**values, **fields})


def call(rollout_id: str = "r1", seq: int = 0, version: int = 0, response: Sequence[int] = (2,), *,
         prompt: Sequence[int] = PROMPT, messages: list[dict[str, Any]] | None = None, **fields: Any) -> CallRecord:
    """An ok chat call of `rollout_id` answered by policy `version` with the tokens `response` (one logprob each);
    `messages` is the request's history; any CallRecord field can be overridden by keyword."""
    values: dict[str, Any] = dict(
        id=seq, rollout_id=rollout_id, attempt=1, seq=seq, kind="chat", stream=False, model="policy", upstream=None,
        status="ok", http_status=200, error=None,
        request={"model": "policy", "messages": messages or [{"role": "user", "content": "hi"}]},
        response_raw=None, response_id=None, prompt_token_ids=list(prompt), response_token_ids=list(response),
        response_logprobs=[-0.5] * len(response), response_text="x", finish_reason="stop", n_choices=1,
        policy_version=version, latency_ms=1.0, created_at=0.0)
    return CallRecord(**{**values, **fields})


def group(group_id: str, rewards: Mapping[str, float | None] | Sequence[float | None], *,
          failures: Mapping[str, str] | None = None, versions: Mapping[str, Sequence[int]] | None = None,
          calls: Callable[[str], tuple[CallRecord, ...]] | None = None, task: dict[str, Any] | None = None,
          version: int = 0) -> FinishedGroup:
    """A finished group submitted at policy `version`: one member per reward (keyed by id; a list names them
    `<group_id>-<i>`), failed with the kind in `failures` where listed. Each member's calls are `calls(id)`, or by
    default one call per version in `versions[id]` (`version` when not listed), each answering two tokens."""
    by_id = rewards if isinstance(rewards, Mapping) else {f"{group_id}-{i}": r for i, r in enumerate(rewards)}
    failures, versions = failures or {}, versions or {}
    members = tuple(rollout(rid, group_id, reward, failure_kind=failures.get(rid),
                            state=RolloutState.FAILED if rid in failures else RolloutState.SUCCEEDED)
                    for rid, reward in by_id.items())

    def one_call_per_version(rid: str) -> tuple[CallRecord, ...]:
        return tuple(call(rid, i, v, [5, 6]) for i, v in enumerate(versions.get(rid, (version,))))

    calls_of = calls or one_call_per_version
    return FinishedGroup(group_id, task or {}, members, {rid: calls_of(rid) for rid in by_id}, version)


@dataclass
class FakeGateway:
    """Creates rollouts, finishes them on demand (in order), serves their calls."""

    created: list[RolloutSpec] = field(default_factory=list)
    finished_log: list[Rollout] = field(default_factory=list)
    call_log: dict[str, list[CallRecord]] = field(default_factory=dict)
    polls: list[float] = field(default_factory=list)
    call_requests: list[str] = field(default_factory=list)
    fail_creates: int = 0
    """The next this many create_rollouts calls raise (a gateway that is down)."""
    event_log: dict[str, list[Event]] = field(default_factory=dict)

    def create_rollouts(self, specs):
        if self.fail_creates:
            self.fail_creates -= 1
            raise ConnectionError("gateway unreachable")
        self.created += specs
        return [RolloutCreated(id=s.id, api_key="k", base_url="http://x", created=True) for s in specs]

    def finish(self, rid: str, reward: float, versions=(0,), details: dict[str, Any] | None = None) -> None:
        spec = next(s for s in self.created if s.id == rid)
        self.finished_log.append(rollout(rid, spec.group_id, reward, finished_seq=len(self.finished_log) + 1))
        self.call_log[rid] = [call(rid, i, v, [10 + i, 11 + i]) for i, v in enumerate(versions)]
        self.event_log[rid] = [Event(id=1, rollout_id=rid, attempt=1, kind=EventKind.REWARD, created_at=0.0,
                                     payload={"reward": reward, "details": details or {}})]

    def finished(self, after=0, limit=100, wait_s=0.0):
        self.polls.append(wait_s)
        page = self.finished_log[after:after + limit]
        return FinishedPage(rollouts=page, cursor=after + len(page))

    def calls(self, rollout_id, attempt=None):
        self.call_requests.append(rollout_id)
        return [c for c in self.call_log.get(rollout_id, []) if attempt is None or c.attempt == attempt]

    def list_events(self, rollout_id):
        return list(self.event_log.get(rollout_id, []))
