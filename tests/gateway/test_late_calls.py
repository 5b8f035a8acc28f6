"""A call recorded for an attempt that has already ended never reaches the trainer (issue 27): the store records a
call only while its attempt is the rollout's running one, checked when the call arrives and again when its row
commits (gateway/call_fence.py), and one row per (rollout, attempt, seq).

The attack: a harness (or a process it left) makes a call after it reported finishing, while or after the controller
graded it, or after the attempt was requeued and the next one started. Before the fence, a call that arrived while
its attempt ran was recorded whenever its answer came back, under the ended attempt's number; the feed fetches the
final attempt's calls (`attempt=`), so a late call of the final attempt was trained with the grade's advantage.

Run on SQLite and PostgreSQL (a store-contract module: tests/gateway/conftest.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from controller.attempt import Attempt
from controller.recipe import Grade, GradeInput
from controller.report import report_attempt
from controller.runners.base import RunResult, RunSpec, Termination
from gateway import call_fence, schema
from gateway.client import GatewayClient
from gateway.errors import Conflict
from gateway.records import RolloutPatch, RolloutSpec, RolloutState
from gateway.scripted import Script
from gateway.sql import with_default_driver
from gateway.store import SqlStore
from rollouts.feed import FeedConfig, RolloutFeed
from tests.controller.support import ScriptRecipe
from tests.gateway.api_support import chat, error_of, new_id
from tests.gateway.support import ADMIN_TOKEN
from tests.gateway.test_responses_chains import row
from tests.inprocess import InProcessScripted

WAIT_S = 30.0  # a generous bound on waits for events that do happen (a loaded machine is slow, not wrong)


class Gate:
    """Holds every request the gated upstream receives until `open()`: a call stays in flight for as long as the test
    needs, whatever the machine's load."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)  # one release per request received
        self._open = threading.Event()

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=WAIT_S), "the call never reached the upstream"

    async def hold(self) -> None:
        self.entered.release()
        await asyncio.to_thread(self._open.wait, WAIT_S)


@pytest.fixture(scope="module")
def gated_upstream() -> Iterator[tuple[InProcessScripted, Gate]]:
    """An upstream that holds each call at its gate (set up before the gateway, so it stops after it)."""
    gate = Gate()
    upstream = InProcessScripted(Script(prompt_tokens=4, response_tokens=3)).start()
    answer = upstream.upstream._answer

    async def held(method: str, path: str, body: bytes) -> bytes:
        await gate.hold()
        return await answer(method, path, body)

    upstream.upstream._answer = held
    yield upstream, gate
    gate.open()
    upstream.stop()


@pytest.fixture(scope="module")
def gate(gated_upstream, gateway, admin_module) -> Gate:
    """The gate of the model `gated`, served by `gated_upstream`."""
    upstream, gate = gated_upstream
    admin_module.register_model("gated", upstream.base_url, version=3)
    return gate


@pytest.fixture(scope="module")
def admin_module(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client


def post(claimed, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(claimed.base_url.removesuffix("/v1") + path, json=body, timeout=WAIT_S + 30,
                      headers={"authorization": f"Bearer {claimed.api_key}", "anthropic-version": "2023-06-01"})


class InFlight:
    """One harness call to the gated model, sent on a thread and held at the upstream until `finish()`."""

    def __init__(self, gate: Gate, claimed, body: dict[str, Any], path: str = "/v1/chat/completions") -> None:
        self._gate = gate
        self.response: httpx.Response | None = None
        gate.close()
        self._thread = threading.Thread(target=lambda: setattr(self, "response", post(claimed, body, path)))
        self._thread.start()
        gate.wait_entered()

    def finish(self) -> httpx.Response:
        self._gate.open()
        self._thread.join(WAIT_S + 60)
        assert self.response is not None
        return self.response


def claim(admin, rollout_id: str, controller: str):
    (claimed,) = [r for r in admin.claim(controller, limit=1000, lease_s=600) if r.id == rollout_id]
    return claimed


def created(admin, prefix: str) -> str:
    rollout_id = new_id(prefix)
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
    return rollout_id


GATED = {
    "chat": ("/v1/chat/completions", {"model": "gated", "messages": [{"role": "user", "content": "hi"}]}),
    "chat streamed": ("/v1/chat/completions", {"model": "gated", "messages": [{"role": "user", "content": "hi"}],
                                               "stream": True}),
    "messages": ("/v1/messages", {"model": "gated", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
}


@pytest.mark.parametrize("kind", GATED, ids=GATED.keys())
def test_a_call_under_way_when_its_attempt_finishes_is_refused_at_its_commit(admin, gate, kind) -> None:
    rollout_id = created(admin, "late")
    claimed = claim(admin, rollout_id, "c1")
    path, body = GATED[kind]
    in_flight = InFlight(gate, claimed, body, path)
    admin.set_state(rollout_id, RolloutState.SUCCEEDED, attempt=1, controller_id="c1")
    response = in_flight.finish()
    if kind == "chat streamed":  # the headers were out: the stream ends with the error in place of [DONE]
        assert response.status_code == 200 and b"[DONE]" not in response.content
        assert b"rollout_finished" in response.content and b"not recorded" in response.content
    elif kind == "messages":
        assert response.status_code == 409 and "[rollout_finished]" in response.json()["error"]["message"]
    else:
        error = error_of(response, 409)
        assert error["code"] == "rollout_finished" and "not recorded" in error["message"], error
    assert admin.calls(rollout_id) == []


def test_a_call_after_the_attempt_finished_is_refused_on_arrival(admin, gate) -> None:
    rollout_id = created(admin, "after")
    claimed = claim(admin, rollout_id, "c1")
    assert post(claimed, chat()).status_code == 200
    admin.set_state(rollout_id, RolloutState.FAILED, "agent", "wrong", attempt=1, controller_id="c1")
    gate.open()
    before = gate.entered._value
    assert error_of(post(claimed, GATED["chat"][1]), 409)["code"] == "rollout_finished"
    assert gate.entered._value == before  # never forwarded
    assert [c.seq for c in admin.calls(rollout_id)] == [0]


def test_an_admin_call_while_requeued_records_nothing(gateway, admin) -> None:
    """No attempt runs while a rollout waits for its next one: even the admin's call has no attempt to go to."""
    rollout_id = created(admin, "requeued")
    claim(admin, rollout_id, "c1")
    admin.set_state(rollout_id, RolloutState.QUEUED, error="node lost", attempt=1, controller_id="c1")
    response = httpx.post(f"{gateway.url}/r/{rollout_id}/v1/chat/completions", json=chat(),
                          headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    assert error_of(response, 409)["code"] == "stale_attempt"
    assert admin.calls(rollout_id) == []


def test_the_feed_gets_exactly_the_final_attempts_calls_made_while_it_ran(admin, gate) -> None:
    """A group's calls: attempt 2's one call. Refused: attempt 1's call under way across the requeue (recorded after
    attempt 2 began), attempt 2's call under way when the controller finished it, and a call after the finish."""
    feed = RolloutFeed(admin, FeedConfig(group_size=1, id_prefix=new_id("feed"), fetch_grades=False),
                       iter([(0, {"id": "task"})]))
    feed.submit(1, policy_version=3)
    rollout_id = f"{feed.config.id_prefix}-0-0"
    first = claim(admin, rollout_id, "c1")
    assert post(first, chat()).status_code == 200
    orphan = InFlight(gate, first, GATED["chat"][1])
    admin.set_state(rollout_id, RolloutState.QUEUED, error="node lost", attempt=1, controller_id="c1")
    second = claim(admin, rollout_id, "c2")
    assert error_of(orphan.finish(), 409)["code"] == "stale_attempt"
    assert post(second, chat()).status_code == 200
    late = InFlight(gate, second, GATED["chat"][1])
    admin.post_reward(rollout_id, 1.0, attempt=2, controller_id="c2")
    admin.set_state(rollout_id, RolloutState.SUCCEEDED, attempt=2, controller_id="c2")
    assert error_of(late.finish(), 409)["code"] == "rollout_finished"
    assert error_of(post(second, chat()), 409)["code"] == "rollout_finished"
    feed.wait_for(1, timeout_s=WAIT_S, poll_s=0.5)
    (group,) = feed.take(1)
    assert [(c.attempt, c.seq, c.model) for c in group.calls[rollout_id]] == [(2, 0, "policy")]
    assert [(c.attempt, c.seq) for c in admin.calls(rollout_id)] == [(1, 0), (2, 0)]


def test_the_controller_closes_the_calls_before_it_grades_so_the_grade_sees_what_the_trainer_trains(
        admin, gate, tmp_path) -> None:
    """While the controller grades, the attempt is still running: a call the harness sent before it ended (held at
    the engine) and one landing during grading are refused, so the graded calls are the trained ones."""
    rollout_id = created(admin, "grading")
    claimed = claim(admin, rollout_id, "ctl")
    assert post(claimed, chat()).status_code == 200
    in_flight = InFlight(gate, claimed, GATED["chat"][1])
    seen: dict[str, Any] = {}

    class GradingWindow(ScriptRecipe):
        def grade(self, graded: GradeInput) -> Grade:
            seen["graded"] = [c.seq for c in graded.calls]
            seen["during"] = post(claimed, chat())
            seen["held"] = in_flight.finish()
            return super().grade(graded)

    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "prepared.txt").write_text("ok")
    spec = RunSpec(rollout_id=rollout_id, attempt=1, command=("true",), base_url="", api_key="", task={},
                   workdir=workdir, timeout_s=1, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    result = RunResult(rollout_id, 1, Termination.EXITED, 0, "exited with code 0", 0.1)
    outcome = report_attempt(Attempt(claimed, GradingWindow(), spec), result, admin, admin, "ctl", 600.0)
    assert outcome is not None and outcome.state == RolloutState.SUCCEEDED
    assert error_of(seen["during"], 409)["code"] == "stale_attempt"  # refused on arrival, never forwarded
    error = error_of(seen["held"], 409)  # answered by the engine during grading: refused at its commit
    assert error["code"] == "stale_attempt" and "closed its calls" in error["message"], error
    assert seen["graded"] == [c.seq for c in admin.calls(rollout_id, attempt=1)] == [0]
    assert admin.get_rollout(rollout_id).reward == 1.0


# -- the store itself ---------------------------------------------------------------------------------------------

@pytest.fixture
def fresh_url(store_url, request, tmp_path) -> str:
    """An empty store of the module's kind (SQLite or PostgreSQL), for the store's own tests."""
    if store_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("postgres_server").create_database("fresh")


def test_the_store_refuses_a_row_of_an_attempt_that_is_not_running_and_a_second_row_of_one_number(fresh_url) -> None:
    async def main() -> tuple[list[str], list[tuple[int, int]]]:
        store = SqlStore(fresh_url)
        codes = []

        async def refused(call: dict[str, Any]) -> None:
            with pytest.raises(Conflict) as raised:
                await store.insert_call(call)
            codes.append(raised.value.code)

        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            await store.insert_call(row(0))  # attempt 0 before any claim: direct use
            await refused(row(0))  # the same number again
            await refused(row(1, attempt=1))  # an attempt not claimed yet
            await store.claim("c", 1, 600.0)
            await refused(row(1))  # attempt 0, after the claim
            await store.insert_call(row(0, attempt=1))
            await store.renew_lease("r", "c", 600.0, close_calls=True)
            await refused(row(1, attempt=1))  # its harness ended: the controller closed its calls
            await store.transition("r", RolloutPatch(state=RolloutState.QUEUED, attempt=1))
            await refused(row(1, attempt=1))  # requeued
            await store.claim("c", 1, 600.0)
            await store.insert_call(row(0, attempt=2))  # the next claim opens the next attempt's calls
            await refused(row(1, attempt=1))  # the previous attempt
            closed = await store.renew_lease("r", "c", 600.0, close_calls=True)
            await refused(row(1, attempt=2))  # closed
            await store.transition("r", RolloutPatch(state=RolloutState.SUCCEEDED, attempt=2))
            await refused(row(2, attempt=2))  # finished
            assert closed.calls_closed_at is not None and (await store.get_rollout("r")).state == "succeeded"
            return codes, [(c.attempt, c.seq) for c in await store.list_calls("r", None)]
        finally:
            store.close()

    codes, recorded = asyncio.run(main())
    assert codes == ["duplicate_call", *["stale_attempt"] * 6, "rollout_finished"]
    assert recorded == [(0, 0), (1, 0), (2, 0)]


def test_a_refused_row_fails_alone_in_its_batch(fresh_url) -> None:
    """Rows committed together: the late one is refused, the others are recorded."""
    async def main() -> tuple[list[Any], list[tuple[str, int]]]:
        store = SqlStore(fresh_url)
        try:
            await store.create_rollouts([RolloutSpec(id=i, group_id="g") for i in ("r", "s")])
            await store.claim("c", 2, 600.0)
            await store.transition("s", RolloutPatch(state=RolloutState.CANCELLED))
            results = await asyncio.gather(*(store.insert_call(row(n, attempt=1, rollout_id=rid))
                                             for n, rid in enumerate(["r", "s", "r"])), return_exceptions=True)
            listed = [(c.rollout_id, c.seq) for rid in ("r", "s") for c in await store.list_calls(rid, None)]
            return [getattr(r, "code", r) for r in results], listed
        finally:
            store.close()

    results, recorded = asyncio.run(main())
    assert results == [None, "rollout_finished", None]
    assert recorded == [("r", 0), ("r", 2)]


def test_an_older_store_gets_the_unique_number_and_the_fence_and_one_with_duplicates_is_refused(fresh_url) -> None:
    """An older store: the plain index, no trigger. Opened with a duplicate number, the gateway refuses it naming the
    rows and the fix; once fixed it opens with the unique index (the plain one dropped) and the fence."""
    SqlStore(fresh_url).close()
    engine = sa.create_engine(with_default_driver(fresh_url))
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TRIGGER {call_fence.TRIGGER}")
        else:
            conn.exec_driver_sql(f"DROP TRIGGER {call_fence.TRIGGER} ON calls")
        conn.exec_driver_sql(f"DROP INDEX {schema.UNIQUE_CALL_NUMBER}")
        conn.exec_driver_sql(f"CREATE INDEX {schema.OLD_CALL_INDEX} ON calls (rollout_id, attempt, seq)")
        conn.execute(schema.calls.insert(), [row(5), row(5), row(6)])
    with pytest.raises(RuntimeError, match="'r' attempt 0 seq 5 \\(2 rows\\).*DELETE FROM calls"):
        SqlStore(fresh_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(schema.KEEP_FIRST_CALL)
    SqlStore(fresh_url).close()
    with engine.connect() as conn:
        indexes = {ix["name"]: ix["unique"] for ix in sa.inspect(conn).get_indexes("calls")}
        seqs = [r.seq for r in conn.execute(sa.select(schema.calls.c.seq).order_by(schema.calls.c.id))]
        with pytest.raises(sa.exc.IntegrityError, match=call_fence.FENCE_MARK):  # no rollout 'r': fenced
            conn.execute(schema.calls.insert(), [row(7)])
    engine.dispose()
    assert (indexes.get(schema.UNIQUE_CALL_NUMBER), schema.OLD_CALL_INDEX in indexes, seqs) == (True, False, [5, 6])


def test_a_call_number_taken_while_the_gateway_waits_is_never_a_second_row(fresh_url) -> None:
    """The unique number holds for numbers the gateway hands out in memory too: a store reopened mid-attempt goes on
    after the highest recorded number."""
    async def main() -> list[int]:
        store = SqlStore(fresh_url)
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            seqs = [await store.next_call_seq("r", 0) for _ in range(2)]
            for seq in seqs:
                await store.insert_call(row(seq))
        finally:
            store.close()
        again = SqlStore(fresh_url)
        try:
            seq = await again.next_call_seq("r", 0)
            await again.insert_call(row(seq))
            return [c.seq for c in await again.list_calls("r", 0)]
        finally:
            again.close()

    assert asyncio.run(main()) == [0, 1, 2]
