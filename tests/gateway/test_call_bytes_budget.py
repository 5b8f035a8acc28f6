"""The per-attempt budget of recorded call bytes (`max_call_bytes_per_attempt`): a request past it is refused on
arrival, an answer past it at its recording (413 `call_bytes_quota_exceeded`, nothing recorded, no number taken by a
refused request); a harness that gives up after it is the agent's failure; the controller reads an attempt's calls
in pages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import FailureKind, RolloutSpec, RolloutState
from gateway.store import SqlStore
from tests.controller.support import report_failed_exit
from tests.gateway.api_support import claimed_rollout, write_config
from tests.gateway.support import ADMIN_TOKEN
from tests.gateway.test_responses_chains import insert_rows, row
from tests.inprocess import InProcessGateway

BUDGET_BYTES = 64 << 10
WAIT_S = 30.0


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory, scripted) -> Iterator[GatewayClient]:
    """A gateway whose attempts may record BUDGET_BYTES of calls (each test uses rollouts of its own)."""
    tmp_path = tmp_path_factory.mktemp("budget")
    config = write_config(tmp_path / "gw.yaml", max_call_bytes_per_attempt=BUDGET_BYTES)
    gateway = InProcessGateway(tmp_path / "store.db", config_path=config).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", scripted.base_url, version=3)
            yield admin
    finally:
        gateway.stop()



def _post(claimed, content_bytes: int, **fields) -> httpx.Response:
    body = {"model": "policy", "messages": [{"role": "user", "content": "x" * content_bytes}], **fields}
    return httpx.post(claimed.base_url + "/chat/completions", json=body, timeout=WAIT_S,
                      headers={"authorization": f"Bearer {claimed.api_key}"})


def _stored_bytes(admin: GatewayClient, rollout_id: str) -> int:
    return sum(len(c.response_raw or "") + len(httpx.Request("POST", "/", json=c.request).content)
               for c in admin.calls(rollout_id, attempt=1))


def test_a_request_past_the_budget_is_refused_on_arrival_and_takes_no_number(budgeted) -> None:
    claimed = claimed_rollout(budgeted, "req")
    answers = [_post(claimed, 40 << 10), _post(claimed, 40 << 10), _post(claimed, 100)]
    assert [a.status_code for a in answers] == [200, 413, 200], [a.text[:300] for a in answers]
    error = answers[1].json()["error"]
    assert error["code"] == "call_bytes_quota_exceeded"
    assert "max_call_bytes_per_attempt" in error["message"]
    calls = budgeted.calls(claimed.id, attempt=1)
    assert [c.seq for c in calls] == [0, 1]  # the refused request left no gap
    assert _stored_bytes(budgeted, claimed.id) <= BUDGET_BYTES


@pytest.mark.parametrize("path", ["/chat/completions", "/messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_past_the_budget_is_not_recorded(budgeted, stream, path) -> None:
    """The request fits, the engine's answer (a few KB) does not: refused at its recording (a 413, or a stream's
    closing error event instead of its end), nothing recorded; chat as it is and Messages translated alike."""
    claimed = claimed_rollout(budgeted, "ans")
    body = {"model": "policy", "max_tokens": 8, "stream": stream,
            "messages": [{"role": "user", "content": "x" * (BUDGET_BYTES - 300)}]}
    answer = httpx.post(claimed.base_url + path, json=body, timeout=WAIT_S,
                        headers={"authorization": f"Bearer {claimed.api_key}"})
    if stream:
        assert answer.status_code == 200
        assert "call_bytes_quota_exceeded" in answer.text
        assert "[DONE]" not in answer.text and "message_stop" not in answer.text
    else:
        assert answer.status_code == 413 and "call_bytes_quota_exceeded" in answer.text, answer.text[:300]
    assert budgeted.calls(claimed.id, attempt=1) == []


def test_a_harness_that_gives_up_after_the_budget_is_the_agents_failure(budgeted, tmp_path: Path) -> None:
    claimed = claimed_rollout(budgeted, "gaveup")
    assert _post(claimed, 100).status_code == 200
    assert _post(claimed, BUDGET_BYTES).status_code == 413
    outcome = report_failed_exit(budgeted, claimed, tmp_path)
    assert outcome is not None and (outcome.state, outcome.failure_kind) == (RolloutState.FAILED, FailureKind.AGENT)
    rollout = budgeted.get_rollout(claimed.id)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.AGENT, 1)


def test_the_client_reads_an_attempts_calls_in_pages(budgeted) -> None:
    claimed = claimed_rollout(budgeted, "pages")
    for _ in range(5):
        assert _post(claimed, 10).status_code == 200
    budgeted.calls_page = 2
    try:
        paged = budgeted.calls(claimed.id, attempt=1)
    finally:
        del budgeted.calls_page
    assert [c.seq for c in paged] == [0, 1, 2, 3, 4]
    assert paged == budgeted.calls(claimed.id)  # the whole listing (every attempt, one request) agrees


def test_a_page_holds_no_more_bytes_than_asked_but_always_one_call(budgeted) -> None:
    """Pages bounded by stored bytes (`max_bytes`): a page stops before the call that would pass the bound, a call
    larger than the bound is a page of its own, the header says whether calls follow, and the client's pages read
    the same calls as one listing."""
    claimed = claimed_rollout(budgeted, "bytepages")
    for size in (10, 6000, 10, 10, 12000, 10):
        assert _post(claimed, size).status_code == 200
    path = f"/v1/admin/rollouts/{claimed.id}/calls"
    pages, after = [], -1
    while True:
        response = budgeted._send("GET", path, params={"attempt": 1, "after_seq": after, "limit": 32,
                                                        "max_bytes": 9000})
        page = [call["seq"] for call in response.json()]
        pages.append((page, response.headers["x-harnessrl-more-calls"]))
        if response.headers["x-harnessrl-more-calls"] == "false":
            break
        after = page[-1]
    assert pages == [([0, 1], "true"), ([2, 3], "true"), ([4], "true"), ([5], "false")]
    budgeted.calls_page_bytes = 9000
    try:
        paged = budgeted.calls(claimed.id, attempt=1)
    finally:
        del budgeted.calls_page_bytes
    assert [c.seq for c in paged] == [0, 1, 2, 3, 4, 5] and paged == budgeted.calls(claimed.id)
    empty = budgeted._send("GET", path, params={"attempt": 1, "after_seq": 5, "limit": 32, "max_bytes": 9000})
    assert empty.json() == [] and "x-harnessrl-more-calls" not in empty.headers
    refused = httpx.get(budgeted._http.base_url.join(path), params={"max_bytes": 10},
                        headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert refused.status_code == 400 and "attempt" in refused.text


@pytest.mark.parametrize("store_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_the_store_sizes_a_page_from_every_stored_column(store_kind, tmp_path, request) -> None:
    """`list_calls(max_bytes=...)` counts each row's bodies, token data, continuation and text (SQLite's and
    PostgreSQL's length of bytes and text alike), without reading them."""
    url = (request.getfixturevalue("postgres_server").create_database("byte_pages") if store_kind == "postgres"
           else f"sqlite:///{tmp_path / 'store.db'}")
    heavy = {"request": b'{"x": "' + b"y" * 4000 + b'"}', "response_raw": b"x" * 4000,
             "prompt_token_ids": b"\x01" * 4000, "response_token_ids": b"\x02" * 4000,
             "response_logprobs": b"\x03" * 4000, "response_text": "t" * 4000, "continuation": b"c" * 4000}

    async def main() -> list[list[int]]:
        store = SqlStore(url)
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            await insert_rows(store, [row(0), *(row(1 + i, **{column: value}) for i, (column, value)
                                                in enumerate(heavy.items())), row(10)])
            pages, after = [], -1
            while page := await store.list_calls("r", 0, after_seq=after, limit=32, max_bytes=4500):
                pages.append([call.seq for call in page])
                after = page[-1].seq
            return pages
        finally:
            store.close()

    assert asyncio.run(main()) == [[0, 1], [2], [3], [4], [5], [6], [7, 10]]  # a column left out joins two calls
