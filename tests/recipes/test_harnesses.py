"""The real harnesses as subprocesses, through the real gateway, in front of the embedded engine (tiny model).

Each runs under the harness contract only (OPENAI_BASE_URL, OPENAI_API_KEY, HARNESSRL_TASK, a working directory laid
out by the recipe), must exit 0, have its calls recorded with token IDs, and be graded in the recipe's range.
The tiny model is random: it follows no format, so the rewards are checked for range, not value.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from controller.recipe import TASK_FILE, GradeInput
from controller.recipes import get_recipe
from gateway.client import GatewayClient
from gateway.records import CallStatus, RolloutSpec
from recipes.search.actions import INVALID_REPLY, ActionKind, completed_reply, parse_action
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

HARNESS_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def admin(tmp_path_factory, engine_url):
    gateway = InProcessGateway(tmp_path_factory.mktemp("gw-agents") / "store.db").start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("tiny", engine_url + "/v1")
        yield client
    gateway.stop()


def _run(admin: GatewayClient, recipe_name: str, task: dict, workdir: Path) -> tuple[subprocess.CompletedProcess, list]:
    """Do what the controller does: write the task, prepare the workdir, run the harness, fetch the calls."""
    recipe = get_recipe(recipe_name)
    created = admin.create_rollouts([RolloutSpec(id=task["id"], group_id=recipe_name)])[0]
    (workdir / TASK_FILE).write_text(json.dumps(task))
    recipe.prepare_workdir(task, workdir)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENAI_")}
    env |= {"OPENAI_BASE_URL": created.base_url, "OPENAI_API_KEY": created.api_key,
            "HARNESSRL_TASK": str(workdir / TASK_FILE)}
    done = subprocess.run(recipe.harness_command(), cwd=workdir, env=env, capture_output=True,
                          timeout=HARNESS_TIMEOUT_S)
    # Decoded without universal newlines: a random model's text may hold a bare "\r", which text=True turns into "\n".
    done.stdout, done.stderr = done.stdout.decode("utf-8"), done.stderr.decode("utf-8", "replace")
    return done, admin.calls(task["id"])


def _assert_recorded(calls: list) -> None:
    assert calls, "no call was recorded"
    for call in calls:
        assert call.status == CallStatus.OK and call.model == "policy"
        assert call.prompt_token_ids and call.response_token_ids


def test_instruction_following_harness(admin, tmp_path):
    recipe = get_recipe("instruction_following")
    task = {**recipe.generate(1, seed=11)[0], "max_tokens": 16}
    done, calls = _run(admin, "instruction_following", task, tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_recorded(calls)
    assert len(calls) == 1 and calls[0].request["messages"][0]["content"] == task["prompt"]
    assert done.stdout.strip() == (calls[0].response_text or "").strip()
    graded = recipe.grade(GradeInput(task=task, workdir=tmp_path, calls=calls, exit_code=done.returncode))
    assert 0.0 <= graded.reward <= 1.0
    assert len(graded.details["instructions"]) == len(task["instructions"])


def test_search_harness(admin, tmp_path):
    recipe = get_recipe("search")
    task = {**recipe.generate(2, seed=11)[1], "max_tokens": 16, "max_turns": 3}
    done, calls = _run(admin, "search", task, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "corpus.jsonl").exists()
    _assert_recorded(calls)
    assert 1 <= len(calls) <= 3
    assert task["question"] in calls[0].request["messages"][0]["content"]
    assert calls[0].request["stop"] == ["</search>", "</answer>"]
    for earlier, later in zip(calls, calls[1:], strict=False):  # each turn adds the reply and the tool's message
        before, after = earlier.request["messages"], later.request["messages"]
        assert after[: len(before)] == before and len(after) == len(before) + 2
        action = parse_action(earlier.response_text)
        assert after[-2] == {"role": "assistant", "content": completed_reply(earlier.response_text, action)}
        expected_tool = INVALID_REPLY if action.kind is ActionKind.INVALID else "<information>"
        assert after[-1]["role"] == "user" and after[-1]["content"].startswith(expected_tool)
    if parse_action(calls[-1].response_text).kind is not ActionKind.ANSWER:
        assert len(calls) == 3 and "no answer" in done.stdout
    graded = recipe.grade(GradeInput(task=task, workdir=tmp_path, calls=calls, exit_code=done.returncode))
    assert graded.reward in (0.0, 1.0) and graded.details["calls"] == len(calls)
