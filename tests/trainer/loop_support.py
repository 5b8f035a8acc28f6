"""Hand-built gateway records and a fake gateway for tests of the training loop's pieces."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.records import CallRecord, FinishedPage, Rollout, RolloutCreated, RolloutSpec, RolloutState

PROMPT = [1, 504, 2116]


def rollout(rid: str, group: str, reward: float | None = 1.0, *, state: RolloutState = RolloutState.SUCCEEDED,
            failure_kind: str | None = None, attempt: int = 1, seq: int = 1) -> Rollout:
    return Rollout(id=rid, group_id=group, input={}, mode="train", state=state, attempt=attempt, max_attempts=3,
                   failure_kind=failure_kind, reward=reward, created_at=0.0, finished_at=1.0, finished_seq=seq)


def call(rid: str, seq: int, version: int, response: list[int], *, attempt: int = 1, status: str = "ok",
         prompt: list[int] | None = None) -> CallRecord:
    return CallRecord(id=seq, rollout_id=rid, attempt=attempt, seq=seq, kind="chat", stream=False, model="policy",
                      upstream=None, status=status, http_status=200, error=None,
                      request={"messages": [{"role": "user", "content": "hi"}]}, response_raw=None, response_id=None,
                      prompt_token_ids=prompt or PROMPT, response_token_ids=response,
                      response_logprobs=[-0.5] * len(response), response_text="x", finish_reason="stop", n_choices=1,
                      policy_version=version, latency_ms=1.0, created_at=0.0)


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

    def create_rollouts(self, specs):
        if self.fail_creates:
            self.fail_creates -= 1
            raise ConnectionError("gateway unreachable")
        self.created += specs
        return [RolloutCreated(id=s.id, api_key="k", base_url="http://x", created=True) for s in specs]

    def finish(self, rid: str, reward: float, versions=(0,)) -> None:
        spec = next(s for s in self.created if s.id == rid)
        self.finished_log.append(rollout(rid, spec.group_id, reward, seq=len(self.finished_log) + 1))
        self.call_log[rid] = [call(rid, i, v, [10 + i, 11 + i]) for i, v in enumerate(versions)]

    def finished(self, after=0, limit=100, wait_s=0.0):
        self.polls.append(wait_s)
        page = self.finished_log[after:after + limit]
        return FinishedPage(rollouts=page, cursor=after + len(page))

    def calls(self, rollout_id, attempt=None):
        self.call_requests.append(rollout_id)
        return [c for c in self.call_log.get(rollout_id, []) if attempt is None or c.attempt == attempt]
