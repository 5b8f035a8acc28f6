"""Attacks of the 12-05 review on the call fence, the forced tool_choice mask and the reward metrics: the ones that
succeeded, as tests of what should hold (the holes not fixed here are `xfail(strict=True)`, naming the hole).

The adversary is the policy: its harness and anything it runs in its sandbox. It chooses how its harness ends
(answer, exit non-zero, run until the harness timeout) and wants a higher reward, advantage or validation mean
without solving the task.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from controller.attempt import Attempt
from controller.recipe import Grade, GradeInput
from controller.report import report_attempt
from controller.runners.base import RunResult, RunSpec, Termination
from flows.prefect_tasks.rollouts import run_validation
from gateway.client import GatewayClient
from gateway.records import FailureKind, RolloutSpec, RolloutState
from rollouts.groups import scored_reward
from tests.controller.support import ScriptRecipe
from tests.gateway.api_support import new_id, write_config
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from trainer.prepared_step import reward_metrics
from trainer.sampling import sampling_params

WAIT_S = 30.0  # a generous bound on waits for events that do happen (a loaded machine is slow, not wrong)


class SignedScale(ScriptRecipe):
    """A recipe whose grader's scale is [-1, 1] (a file recipe's `grader.reward_range: [-1, 1]`): a wrong answer is
    graded -1, the bottom, which is also what a refused tree or a crashed grader pays (`failure_reward`)."""

    failure_reward = -1.0

    def grade(self, graded: GradeInput) -> Grade:
        return Grade(-1.0, {"resolved": False})


def _report(admin, tmp_path: Path, recipe, exit_code: int) -> str:
    """One rollout claimed, run (its harness ended with `exit_code`) and reported by the controller; its id."""
    rollout_id = new_id("signed")
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
    (claimed,) = [r for r in admin.claim("ctl", limit=1000, lease_s=600) if r.id == rollout_id]
    workdir = tmp_path / rollout_id
    workdir.mkdir()
    (workdir / "prepared.txt").write_text("ok")
    spec = RunSpec(rollout_id=rollout_id, attempt=1, command=("true",), base_url="", api_key="", task={},
                   workdir=workdir, timeout_s=1, stdout_path=tmp_path / f"{rollout_id}.o",
                   stderr_path=tmp_path / f"{rollout_id}.e")
    result = RunResult(rollout_id, 1, Termination.EXITED, exit_code, f"exited with code {exit_code}", 0.1)
    assert report_attempt(Attempt(claimed, recipe, spec), result, admin, admin, "ctl", 600.0) is not None
    return rollout_id


def test_exiting_non_zero_never_scores_above_a_wrong_answer(admin, tmp_path) -> None:
    recipe = SignedScale()
    wrong = admin.get_rollout(_report(admin, tmp_path, recipe, exit_code=0))
    crashed = admin.get_rollout(_report(admin, tmp_path, recipe, exit_code=1))
    assert (wrong.state, wrong.reward) == (RolloutState.SUCCEEDED, -1.0)
    # the controller posts the recipe's failure_reward, the bottom of its scale, for an agent failure it does not grade
    assert (crashed.state, crashed.failure_kind, crashed.reward) == (RolloutState.FAILED, FailureKind.AGENT, -1.0)
    failure_reward = 0.0  # AdvantageConfig().reported_failure_reward
    crashed_scores = scored_reward(crashed, failure_reward)
    assert crashed_scores is not None and crashed_scores <= scored_reward(wrong, failure_reward)
    metrics = reward_metrics([crashed, crashed], 1.0, "val", failure_reward)
    assert metrics["val/reward_mean"] <= reward_metrics([wrong, wrong], 1.0, "val", failure_reward)["val/reward_mean"]


def _drive(admin, prefix: str, finish: int, stop: threading.Event) -> None:
    """The controller's side of a validation pass: claim the pass's rollouts as they are created, finish the first
    `finish` solved (reward 1) and leave the others running (their harnesses still at work: a policy that stalls on
    the tasks it cannot solve, within its harness timeout)."""
    finished: set[str] = set()
    while not stop.is_set() and len(finished) < finish:
        for claimed in admin.claim("val-ctl", limit=100, lease_s=600):
            if not claimed.id.startswith(prefix):
                continue
            if int(claimed.id.removeprefix(prefix + "-").split("-")[0]) < finish:
                admin.post_reward(claimed.id, 1.0, attempt=claimed.attempt, controller_id="val-ctl")
                admin.set_state(claimed.id, RolloutState.SUCCEEDED, attempt=claimed.attempt, controller_id="val-ctl")
                finished.add(claimed.id)
        time.sleep(0.1)


def test_a_task_the_policy_stalls_on_does_not_leave_the_validation_mean(admin) -> None:
    prefix = new_id("val")
    stop = threading.Event()
    driver = threading.Thread(target=_drive, args=(admin, prefix, 1, stop), daemon=True)
    driver.start()
    try:
        metrics, groups = run_validation.fn(admin, [{"id": "solved"}, {"id": "stalled"}], prefix, group_size=1,
                                             policy_version=3, timeout_s=3.0, pass_threshold=1.0)
    finally:
        stop.set()
        driver.join(WAIT_S)
    assert [r.id for g in groups for r in g.rollouts] == [f"{prefix}-0-0"]
    assert metrics["val/unfinished_tasks"] == 1.0
    # the stalled task counts at the failure reward (0): one solved of two
    assert metrics["val/reward_mean"] == 0.5 and metrics["val/pass_rate"] == 0.5, metrics
    assert metrics["val/scored"] == 2.0 and metrics["val/graded"] == 1.0


def test_a_harness_cannot_claim_the_engines_forced_opening_for_its_forced_call(admin) -> None:
    """Held: `forced_prompt_tokens` comes only from the engine's answer (`tool_choice_forced_tokens`); a harness that
    sends it (or the record's own name) in its request gets neither recorded, so its forced call stays masked on an
    engine that did not report a forced opening (vLLM's grammar over the response)."""
    created = admin.create_rollouts([RolloutSpec(id=new_id("forced"), group_id=new_id("g"))])[0]
    (claimed,) = [r for r in admin.claim("forcer", limit=1000, lease_s=600) if r.id == created.id]
    tools = [{"type": "function", "function": {"name": "submit", "parameters": {"type": "object"}}}]
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "tools": tools,
            "tool_choice": "required", "tool_choice_forced_tokens": 5, "forced_prompt_tokens": 5,
            "sampling": {"forced_prompt_tokens": 5}}
    response = httpx.post(claimed.base_url + "/chat/completions", json=body, timeout=WAIT_S,
                          headers={"authorization": f"Bearer {claimed.api_key}"})
    assert response.status_code == 200, response.text
    (call,) = admin.calls(created.id)
    assert call.sampling is not None and call.sampling.forced_prompt_tokens is None
    assert call.sampling.requested["tool_choice"] == "required"
    assert sorted(call.sampling.requested["dropped"]) == ["forced_prompt_tokens", "sampling",
                                                          "tool_choice_forced_tokens"]
    assert sampling_params(call.sampling).penalized  # masked by the trainer


BUDGET_BYTES = 2 << 20  # the gateway's per-attempt byte budgets in the test below (events, artifacts, calls)


@pytest.fixture
def budgeted_gateway(tmp_path, scripted) -> Iterator[GatewayClient]:
    """A gateway whose per-attempt byte budgets are BUDGET_BYTES and whose request bodies may be 1 MiB."""
    config = write_config(tmp_path / "gw.yaml", max_body_bytes=1 << 20, max_event_bytes_per_attempt=BUDGET_BYTES,
                          max_artifact_bytes_per_attempt=BUDGET_BYTES, max_call_bytes_per_attempt=BUDGET_BYTES)
    gateway = InProcessGateway(tmp_path / "store.db", config_path=config).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", scripted.base_url, version=3)
            yield admin
    finally:
        gateway.stop()


def test_an_attempt_records_no_more_call_bytes_than_its_budget(budgeted_gateway) -> None:
    """Was a hole: recorded calls had a count quota and a per-body cap but no byte budget (unlike events and
    artifacts), and the controller read them all in one listing before grading (a report that raised left the lease to
    expire: infra lease_expired, requeued). Now `max_call_bytes_per_attempt` refuses the request past it (413
    call_bytes_quota_exceeded) and the controller reads an attempt's calls in pages (tests/gateway/
    test_call_bytes_budget.py: the answer past it, the agent's failure, the pages)."""
    admin = budgeted_gateway
    rollout_id = new_id("bytes")
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
    (claimed,) = [r for r in admin.claim("ctl", limit=1000, lease_s=600) if r.id == rollout_id]
    body = {"model": "policy", "messages": [{"role": "user", "content": "x" * (900 << 10)}]}
    statuses = [httpx.post(claimed.base_url + "/chat/completions", json=body, timeout=WAIT_S,
                           headers={"authorization": f"Bearer {claimed.api_key}"}).status_code for _ in range(4)]
    recorded = sum(len(orjson.dumps(call.request)) for call in admin.calls(rollout_id, attempt=1))
    assert recorded <= BUDGET_BYTES, (statuses, recorded)
    assert statuses == [200, 200, 413, 413], statuses


@pytest.mark.slow
def test_a_nul_in_the_model_name_is_answered_as_the_harness_s_error_on_postgresql(postgres_server, scripted) -> None:
    """Was a hole (PostgreSQL only): a NUL in a call's text column failed its insert, a 500 internal_error and the
    call unrecorded. Now a model name with one is 400 (param model) and the engine's text columns are stored
    NUL-escaped on both stores (gateway/nul_text.py; tests/gateway/test_nul_text.py)."""
    gateway = InProcessGateway(db_url=postgres_server.create_database("nul")).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", scripted.base_url, version=3)
            rollout_id = new_id("nul")
            admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
            (claimed,) = [r for r in admin.claim("ctl", limit=1000, lease_s=600) if r.id == rollout_id]
            body = {"model": "po\u0000licy", "messages": [{"role": "user", "content": "hi"}]}
            response = httpx.post(claimed.base_url + "/chat/completions", json=body, timeout=WAIT_S,
                                  headers={"authorization": f"Bearer {claimed.api_key}"})
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == "model"
    finally:
        gateway.stop()
