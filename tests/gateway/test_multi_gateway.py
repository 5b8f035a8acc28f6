"""Two gateway processes on one PostgreSQL store, as a multi-node deployment runs them behind one Service: a rollout's
calls spread over both are numbered and recorded in order; a `kill -9` of one under load loses no acknowledged call
and the rollouts go on through the other; a pause on either holds calls on both and waits for both to drain; a
resume on either releases both, at once (NOTIFY), not at the next heartbeat. The gateways heartbeat every 1 s here
(fleet_poll_s, the default) and count a gateway gone after 3 s of silence (fleet_stale_s)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import RolloutCreated, RolloutPatch, RolloutSpec, RolloutState
from gateway.scripted import Script
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess
from tests.inprocess import InProcessScripted

pytestmark = pytest.mark.slow  # two gateway processes and a PostgreSQL server

FLEET = "fleet_poll_s: 1.0\nfleet_stale_s: 3.0\n"
FAST_FLEET = "fleet_poll_s: 0.1\nfleet_stale_s: 1.0\n"
"""For the stall test: a gateway counted gone after 1 s."""
SLOW_S = 1.5
"""How long the slow model takes to answer: a call in flight while a pause drains."""


@dataclass
class Pair:
    """Two gateway processes on one database, and the scripted upstreams registered on it."""

    a: GatewayProcess
    b: GatewayProcess
    fast: InProcessScripted
    slow: InProcessScripted
    prefix: list[int] = field(default_factory=lambda: [0])

    def rollouts(self, n: int, *, claim: bool = True) -> list[RolloutCreated]:
        """`n` new rollouts (claimed: attempt 1 running, as a controller would leave them)."""
        self.prefix[0] += 1
        specs = [RolloutSpec(id=f"m{self.prefix[0]}-{i}", group_id="g") for i in range(n)]
        with GatewayClient(self.a.url, ADMIN_TOKEN) as admin:
            created = admin.create_rollouts(specs)
            if claim:
                assert len(admin.claim("controller", limit=n)) == n
                created = admin.create_rollouts(specs)  # again: the keys of the claimed attempt
        return created


def harness(gateway: GatewayProcess, created: RolloutCreated, *, timeout_s: float = 30.0) -> httpx.Client:
    """A harness client of `created` that reaches `gateway` (its key's attempt is the claimed one)."""
    return httpx.Client(base_url=f"{gateway.url}/r/{created.id}/v1", timeout=timeout_s,
                        headers={"authorization": f"Bearer {created.api_key}"})


def chat(content: str, model: str = "policy") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8}


def wait_for(predicate, timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s} s"
        time.sleep(0.02)


def both_share(pair: Pair) -> bool:
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
        live = [g for g in admin.state().gateways if g.live]
    return len(live) == 2 and all(g.shared for g in live)


@pytest.fixture(scope="module")
def pair(postgres_server, tmp_path_factory):
    url = postgres_server.create_database("fleet")
    config = tmp_path_factory.mktemp("fleet") / "gateway.yaml"
    config.write_text(FLEET)
    fast = InProcessScripted(Script(prompt_tokens=16, response_tokens=8)).start()
    slow = InProcessScripted(Script(prompt_tokens=16, response_tokens=8, delay_s=SLOW_S)).start()
    a = GatewayProcess(db_url=url, config_path=config).start()
    with GatewayClient(a.url, ADMIN_TOKEN) as admin:  # registered on A before B starts: B loads them at start
        admin.register_model("policy", fast.base_url)
    b = GatewayProcess(db_url=url, config_path=config).start()
    pair = Pair(a, b, fast, slow)
    try:
        wait_for(lambda: both_share(pair), what="both gateways numbering calls in the store")
        yield pair
    finally:
        b.stop()
        a.stop()
        slow.stop()
        fast.stop()


def test_a_rollouts_calls_alternating_between_two_gateways_are_recorded_in_order(pair) -> None:
    [created] = pair.rollouts(1)
    clients = [harness(pair.a, created), harness(pair.b, created)]
    seqs = []
    for i in range(20):
        answer = clients[i % 2].post("/chat/completions", json=chat(f"call {i}"))
        assert answer.status_code == 200, answer.text
        seqs.append(int(answer.headers["x-harnessrl-call-seq"]))
    for client in clients:
        client.close()
    with GatewayClient(pair.b.url, ADMIN_TOKEN) as admin:
        calls = admin.calls(created.id)
    assert seqs == list(range(20))
    assert [c.seq for c in calls] == list(range(20))
    assert [c.request["messages"][0]["content"] for c in calls] == [f"call {i}" for i in range(20)]
    assert all(c.attempt == 1 for c in calls)


def test_concurrent_calls_of_one_rollout_on_both_gateways_get_distinct_gapless_numbers(pair) -> None:
    [created] = pair.rollouts(1)
    calls_each = 10

    def burst(gateway: GatewayProcess) -> list[int]:
        with harness(gateway, created) as client:
            return [int(client.post("/chat/completions", json=chat("x")).raise_for_status()
                        .headers["x-harnessrl-call-seq"]) for _ in range(calls_each)]

    with ThreadPoolExecutor(8) as pool:
        got = [seq for seqs in pool.map(burst, [pair.a, pair.b] * 4) for seq in seqs]
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
        recorded = [c.seq for c in admin.calls(created.id)]
    assert sorted(got) == list(range(8 * calls_each)), "each number given once, none skipped"
    assert recorded == list(range(8 * calls_each))


def test_a_rollout_finished_through_one_gateway_refuses_calls_on_the_other(pair) -> None:
    """B cached the rollout as running; the finish went through A: B's call is refused (409), not recorded."""
    [created] = pair.rollouts(1)
    with harness(pair.b, created) as client:
        assert client.post("/chat/completions", json=chat("before")).status_code == 200
        with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
            admin.set_state(created.id, RolloutState.SUCCEEDED)
        refused = client.post("/chat/completions", json=chat("after"))
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "rollout_finished", refused.text
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
        assert [c.request["messages"][0]["content"] for c in admin.calls(created.id)] == ["before"]


def test_a_rollout_reclaimed_through_one_gateway_takes_its_new_attempts_calls_on_the_other(pair) -> None:
    """B cached attempt 1; the requeue and the new claim went through A: the attempt-2 key is accepted on B (a fresh
    read), its calls numbered from 0 in attempt 2, and the attempt-1 key refused there."""
    [first] = pair.rollouts(1)
    with harness(pair.b, first) as client:
        assert client.post("/chat/completions", json=chat("attempt 1")).status_code == 200
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
        admin.set_state(first.id, RolloutState.QUEUED, error="lease lost", attempt=1, controller_id="controller")
        assert [r.id for r in admin.claim("controller", limit=5)] == [first.id]
        [second] = admin.create_rollouts([RolloutSpec(id=first.id, group_id="g")])
    with harness(pair.b, second) as client:
        answer = client.post("/chat/completions", json=chat("attempt 2"))
    with harness(pair.b, first) as client:
        stale = client.post("/chat/completions", json=chat("attempt 1 again"))
    assert answer.status_code == 200 and answer.headers["x-harnessrl-call-seq"] == "0", answer.text
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_attempt", stale.text
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
        assert [(c.attempt, c.seq) for c in admin.calls(first.id)] == [(1, 0), (2, 0)]


def test_numbers_asked_at_once_are_consecutive_in_arrival_order_and_refused_for_a_finished_rollout(
        postgres_server) -> None:
    """The store's numbering (gateway/numbering.py) on its own: many requests in one batch, several per rollout."""
    from gateway.errors import Conflict
    from gateway.store import SqlStore

    url = postgres_server.create_database("numbers")

    async def main() -> tuple[list[int], str]:
        store = SqlStore(url)
        try:
            await store.create_rollouts([RolloutSpec(id=f"n{i}", group_id="g") for i in range(3)])
            await store.transition("n2", RolloutPatch(state=RolloutState.CANCELLED))
            await store.share_numbering()
            asked = [("n0", 0), ("n1", 0), ("n0", 0), ("n0", 0), ("n1", 0)] * 4
            numbers = await asyncio.gather(*(store.next_call_seq(r, a) for r, a in asked))
            with pytest.raises(Conflict) as refused:
                await store.next_call_seq("n2", 0)
            return numbers, refused.value.code
        finally:
            await store.close_numbering()
            store.close()

    numbers, code = asyncio.run(main())
    asked = ["n0", "n1", "n0", "n0", "n1"] * 4
    for rollout in ("n0", "n1"):
        got = [n for r, n in zip(asked, numbers, strict=True) if r == rollout]
        assert got == list(range(len(got))), (rollout, got)
    assert code == "rollout_finished"


def test_a_pause_on_one_gateway_holds_calls_on_the_other_and_returns_once_both_drained(pair) -> None:
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin_a, GatewayClient(pair.b.url, ADMIN_TOKEN) as admin_b:
        admin_a.register_model("slow", pair.slow.base_url)
        slow, held_b, held_a = pair.rollouts(3)
        wait_for(lambda: harness(pair.b, slow).get("/models").json()["data"].__len__() == 2, timeout_s=0.5,
                 what="the model registered on A served by B (notified, not at its next beat)")
        with ThreadPoolExecutor(4) as pool:
            in_flight = pool.submit(lambda: harness(pair.b, slow).post("/chat/completions", json=chat("s", "slow")))
            wait_for(lambda: admin_a.state().in_flight == 1, what="B's slow call seen in flight from A")
            pause_started = time.monotonic()
            paused = admin_a.pause(timeout_s=30)
            returned_wall = time.time()
            assert time.monotonic() - pause_started < SLOW_S + 0.5, "B's drain seen at once, not at its next beat"
            assert paused.paused and paused.drained and paused.in_flight == 0 and paused.gateways == 2, paused
            assert in_flight.done() and in_flight.result().status_code == 200
            [record] = admin_a.calls(slow.id)
            assert record.created_at + record.latency_ms / 1000 <= returned_wall, "answered before pause returned"

            on_b = pool.submit(lambda: harness(pair.b, held_b).post("/chat/completions", json=chat("held on B")))
            on_a = pool.submit(lambda: harness(pair.a, held_a).post("/chat/completions", json=chat("held on A")))
            wait_for(lambda: admin_a.state().held == 2, what="a call held on each gateway")
            time.sleep(0.3)
            assert not on_b.done() and not on_a.done(), "held calls wait, they neither fail nor pass"
            state = admin_b.state()
            assert state.paused and state.held == 2 and len([g for g in state.gateways if g.live]) == 2

            resumed = admin_b.resume()
            assert not resumed.paused
            released = time.monotonic()
            assert on_a.result(timeout=10).status_code == 200 and on_b.result(timeout=10).status_code == 200
            assert time.monotonic() - released < 0.5, "released by the notification, not at A's next beat (1 s)"
        assert not admin_a.state().paused
        assert admin_a.state().paused_s == pytest.approx(admin_b.state().paused_s, abs=0.05)


@dataclass
class Load:
    """What the harness clients saw: (rollout, call number, response id) of every 200 answer, by gateway."""

    acknowledged: list[tuple[str, int, str, str]] = field(default_factory=list)
    going: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, pair: Pair, created: RolloutCreated) -> None:
        """Calls of one rollout, alternating between the gateways; a gateway that does not answer (killed) is left
        for the other, as a Service's endpoints drop a dead pod."""
        clients = {"a": harness(pair.a, created), "b": harness(pair.b, created)}
        turn = 0
        try:
            while not self.stop.is_set():
                name = "ab"[turn % 2] if len(clients) == 2 else next(iter(clients))
                turn += 1
                try:
                    answer = clients[name].post("/chat/completions", json=chat("go"))
                except httpx.TransportError:  # refused, or cut off in flight by the kill: not acknowledged
                    clients.pop(name).close()
                    continue
                assert answer.status_code == 200, answer.text
                with self.lock:
                    self.acknowledged.append((created.id, int(answer.headers["x-harnessrl-call-seq"]),
                                              answer.json()["id"], name))
                    if len(self.acknowledged) >= 60:
                        self.going.set()
        finally:
            for client in clients.values():
                client.close()


def test_kill9_of_one_gateway_under_load_loses_no_acknowledged_call_and_rollouts_continue(pair) -> None:
    created = pair.rollouts(6)
    load = Load()
    with ThreadPoolExecutor(len(created) * 2) as pool:
        futures = [pool.submit(load.run, pair, created[i % len(created)]) for i in range(len(created) * 2)]
        assert load.going.wait(timeout=60), f"only {len(load.acknowledged)} calls answered in 60 s"
        pair.b.kill9()
        killed_at = len(load.acknowledged)
        time.sleep(1.0)
        load.stop.set()
        for future in futures:
            future.result(timeout=60)
    after_kill = load.acknowledged[killed_at:]
    with GatewayClient(pair.a.url, ADMIN_TOKEN) as admin:
        recorded = {r.id: admin.calls(r.id) for r in created}
        paused = admin.pause(timeout_s=10)  # B's heartbeat is stale by now: not waited for
        admin.resume()
    by_response = {(c.rollout_id, c.response_id): c.seq for calls in recorded.values() for c in calls}
    missing = [a for a in load.acknowledged if by_response.get((a[0], a[2])) != a[1]]
    assert not missing, f"{len(missing)} of {len(load.acknowledged)} acknowledged calls lost: {missing[:5]}"
    assert {a[3] for a in load.acknowledged[:killed_at]} == {"a", "b"}
    assert len(after_kill) >= 10 and {a[3] for a in after_kill} >= {"a"}, "the rollouts went on through A"
    for rollout_id, calls in recorded.items():
        seqs = [c.seq for c in calls]
        assert len(seqs) == len(set(seqs)), f"{rollout_id}: a number given twice"
    assert paused.drained and paused.gateways == 1
    pair.b.start()  # for any test after this one
    wait_for(lambda: both_share(pair), what="the restarted gateway rejoining")


def test_a_gateway_stalled_past_the_stale_time_numbers_nothing_until_both_share(postgres_server, tmp_path) -> None:
    """A (alone: numbering in memory) is stopped (SIGSTOP) past fleet_stale_s; B starts, counts it gone and numbers
    in memory too; A continues (SIGCONT): its heartbeat is late, so it numbers no call (503) until both number in the
    store; no number is given twice."""
    import signal

    config = tmp_path / "gateway.yaml"
    config.write_text(FAST_FLEET)
    url = postgres_server.create_database("stall")
    upstream = InProcessScripted(Script(prompt_tokens=4, response_tokens=2)).start()
    a = GatewayProcess(db_url=url, config_path=config).start()
    b = GatewayProcess(db_url=url, config_path=config)
    try:
        with GatewayClient(a.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            [created] = admin.create_rollouts([RolloutSpec(id="stall", group_id="g")])
        with harness(a, created) as client:
            assert [client.post("/chat/completions", json=chat("a")).status_code for _ in range(3)] == [200] * 3
        a.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.2)  # past fleet_stale_s: B will count A gone
        b.start()
        with harness(b, created) as client:
            assert client.post("/chat/completions", json=chat("b")).headers["x-harnessrl-call-seq"] == "3"
        a.proc.send_signal(signal.SIGCONT)
        with harness(a, created) as client:
            statuses = []
            deadline = time.monotonic() + 20
            while not statuses or statuses[-1] != 200:
                assert time.monotonic() < deadline, statuses
                statuses.append(client.post("/chat/completions", json=chat("a again")).status_code)
        assert set(statuses) <= {200, 503}, statuses
        with GatewayClient(a.url, ADMIN_TOKEN) as admin:
            seqs = [c.seq for c in admin.calls(created.id)]
            gateways = admin.state().gateways
        assert len(seqs) == len(set(seqs)) == 5, seqs
        assert all(g.shared for g in gateways if g.live) and len([g for g in gateways if g.live]) == 2
    finally:
        with contextlib.suppress(Exception):
            a.proc.send_signal(signal.SIGCONT)
        b.stop()
        a.stop()
        upstream.stop()
