"""The real Claude Code and Codex CLIs (installed by `make harnesses`), each whole inside the local runner's sandbox,
through the gateway's Anthropic Messages and OpenAI Responses routes, in front of a scripted chat-completions upstream
that plays a short tool-using episode on a generated SWE task in the CLI's own tools (read the file, edit it, run the
tests, finish): the repository ends fixed, the SWE grader gives reward 1, every call is recorded with token IDs, and
the trainer's samples build from the recorded calls."""

from __future__ import annotations

import pytest

from agents.cli_harness.harness import OUTPUT_FILE
from agents.cli_harness.launch import REPO_DIR
from controller.recipe import GradeInput
from controller.runners.base import Termination
from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from tests.agents.cli_episode import Episode, EpisodeUpstream, claude_code_steps, codex_steps
from tests.agents.cli_support import (
    CALL_KINDS,
    built_samples,
    check_recorded,
    cli_missing,
    generated_task,
    prepare,
    run_sandboxed,
    sandbox_missing,
    summary_line,
)
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

pytestmark = pytest.mark.slow  # a real CLI (a 100-400 MB native binary) per test, sandboxed
TASK_OVERRIDES = {"model": "policy", "step_limit": 8, "max_tokens": 256, "command_timeout_s": 60}


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_cli_fixes_the_task_through_the_gateway_and_is_graded(cli, tmp_path):
    if (reason := cli_missing(cli) or sandbox_missing()) is not None:
        pytest.skip(reason)
    task = generated_task(tmp_path / "task")
    recipe = task.recipe(cli)
    workdir = tmp_path / "runs" / "w1"
    task_input = prepare(task, recipe, workdir, TASK_OVERRIDES)
    patch = task.instance["patch"]
    steps = claude_code_steps(workdir / REPO_DIR, patch) if cli == "claude-code" else codex_steps(patch)
    upstream = EpisodeUpstream(Episode(steps))
    gateway = InProcessGateway(tmp_path / "gateway.db").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            created = admin.create_rollouts([RolloutSpec(id=f"{cli}-1", group_id="g1", input=task_input)])[0]
            result, stdout, stderr = run_sandboxed(recipe, task_input, workdir, created.base_url, created.api_key,
                                                   created.id, timeout_s=120)
            calls = admin.calls(created.id)
    finally:
        gateway.stop()
        upstream.close()
    output = (workdir / OUTPUT_FILE).read_text() if (workdir / OUTPUT_FILE).exists() else ""
    assert (result.termination, result.exit_code) == (Termination.EXITED, 0), (stderr[-3000:], output[-3000:])
    assert summary_line(stdout)["exit_status"] == "Completed"
    assert upstream.episode.answered.count("final") >= 1, upstream.episode.answered
    assert [a for a in upstream.episode.answered if a.startswith("step")] == ["step 0", "step 1", "step 2"]
    check_recorded(calls, CALL_KINDS[cli])
    grade = recipe.grade(GradeInput(task=task_input, workdir=workdir, calls=calls, exit_code=0))
    assert grade.reward == 1.0 and grade.details["resolved"] is True, grade.details
    built_samples(calls, "g1")
