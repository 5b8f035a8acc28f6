"""RolloutFeed under a flaky gateway: a failed poll changes nothing, and waiting goes on through transient errors."""

from __future__ import annotations

import httpx
import pytest

from gateway.client import GatewayAPIError
from rollouts.feed import FeedConfig, RolloutFeed, transient_read_error
from tests.trainer.loop_support import FakeGateway


class FlakyGateway(FakeGateway):
    """A FakeGateway whose next reads fail with the queued errors (`finished` or `calls`)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: dict[str, list[BaseException]] = {"finished": [], "calls": []}

    def finished(self, after=0, limit=100, wait_s=0.0):
        if self.failures["finished"]:
            raise self.failures["finished"].pop(0)
        return super().finished(after, limit, wait_s)

    def calls(self, rollout_id, attempt=None):
        if self.failures["calls"]:
            raise self.failures["calls"].pop(0)
        return super().calls(rollout_id, attempt)


def feed_of(gateway: FakeGateway, now: list[float] | None = None, slept: list[float] | None = None) -> RolloutFeed:
    clock = (lambda: now[0]) if now is not None else (lambda: 0.0)
    return RolloutFeed(gateway, FeedConfig(2, "run"), iter([(i, {"id": f"t{i}"}) for i in range(4)]), clock=clock,
                       sleep=(slept.append if slept is not None else lambda _s: None))


def test_a_poll_that_fails_fetching_a_groups_calls_leaves_the_feed_as_it_was():
    gateway = FlakyGateway()
    feed = feed_of(gateway)
    feed.submit(2, policy_version=0)
    for rollout_id in ("run-0-0", "run-0-1", "run-1-0"):
        gateway.finish(rollout_id, 1.0)
    gateway.failures["calls"].append(httpx.ReadTimeout("slow"))
    with pytest.raises(httpx.ReadTimeout):
        feed.poll(0.0)
    assert feed.ready == 0 and feed.in_flight == 2
    gateway.finish("run-1-1", 0.0)
    assert feed.poll(0.0) == 2, "the rollouts of the failed poll are read again, none lost"
    first, second = feed.take(2)
    assert [r.id for r in first.rollouts] == ["run-0-0", "run-0-1"] and set(first.calls) == {"run-0-0", "run-0-1"}
    assert [r.id for r in second.rollouts] == ["run-1-0", "run-1-1"] and feed.in_flight == 0


@pytest.mark.parametrize("error", [httpx.ReadTimeout("slow"), httpx.ConnectError("refused"),
                                   ConnectionResetError("reset"), GatewayAPIError(503, "busy", None)])
def test_waiting_goes_on_through_a_transient_read_error(error):
    gateway, slept = FlakyGateway(), []
    feed = feed_of(gateway, slept=slept)
    feed.submit(1, policy_version=0)
    gateway.finish("run-0-0", 1.0)
    gateway.finish("run-0-1", 1.0)
    gateway.failures["finished"].append(error)
    feed.wait_for(1, timeout_s=60, poll_s=5)
    assert feed.ready == 1 and slept == [5]


@pytest.mark.parametrize("error", [GatewayAPIError(401, "bad token", "unauthorized"), ValueError("bad page")])
def test_a_refusal_or_a_bug_is_raised_at_once(error):
    gateway = FlakyGateway()
    feed = feed_of(gateway)
    feed.submit(1, policy_version=0)
    gateway.failures["finished"].append(error)
    with pytest.raises(type(error)):
        feed.wait_for(1, timeout_s=60, poll_s=5)


def test_a_gateway_that_stays_unreachable_ends_in_the_timeout_naming_the_counts():
    now, gateway = [0.0], FlakyGateway()
    feed = feed_of(gateway, now=now, slept=[])
    feed.submit(1, policy_version=0)
    gateway.failures["finished"] = [httpx.ConnectError("refused")] * 100

    def tick(_ready: int) -> None:
        now[0] += 5.0

    with pytest.raises(TimeoutError, match="0 of 1 groups complete after 20 s"):
        feed.wait_for(1, timeout_s=20, poll_s=5, on_poll=tick)


@pytest.mark.parametrize(("error", "transient"), [
    (httpx.ReadTimeout("t"), True), (httpx.RemoteProtocolError("p"), True), (OSError("o"), True),
    (GatewayAPIError(500, "m", None), True), (GatewayAPIError(409, "m", "conflict"), False),
    (KeyError("k"), False), (httpx.HTTPStatusError("s", request=httpx.Request("GET", "http://x"), response=None),
                             False),
])
def test_transient_read_error_table(error, transient):
    assert transient_read_error(error) is transient
