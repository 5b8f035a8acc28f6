"""The real Claude Code and Codex CLIs (installed by `make harnesses`), run by the controller as `train-swe` runs them
(the recipe found by the task's "recipe" name, each CLI whole inside the local runner's sandbox, graded, its reward
posted), through the gateway's Anthropic Messages and OpenAI Responses routes, in front of a scripted chat-completions
upstream that plays a short tool-using episode on a generated SWE task in the CLI's own tools (read the file, edit it,
run the tests, finish; Codex edits with its free-form `apply_patch`): the repository ends fixed, the SWE grader gives
reward 1, every call is recorded with token IDs, and the trainer's samples build from the recorded calls: one sample
per rollout with the gateway's recorded turns (the CLI recipes' default), while Claude Code's re-sent `Edit` call
(with `replace_all: false` added) splits it without them."""

from __future__ import annotations

import pytest

from gateway.client import GatewayClient
from gateway.records import RolloutSpec, RolloutState
from recipes.cli_harness.launch import REPO_DIR
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from tests.recipes.cli_episode import Episode, EpisodeUpstream, bug_file, claude_code_steps, codex_steps, fix_of
from tests.recipes.cli_support import (
    CALL_KINDS,
    attempt_dir,
    built_samples,
    check_recorded,
    cli_missing,
    generated_task,
    harness_logs,
    run_through_controller,
    sandbox_missing,
    summary_line,
    task_input,
)

pytestmark = pytest.mark.slow  # a real CLI (a 100-400 MB native binary) per test, sandboxed
TASK_OVERRIDES = {"model": "policy", "step_limit": 8, "max_tokens": 256, "command_timeout_s": 60}


@pytest.mark.parametrize(("cli", "recorded_turns"), [("claude-code", True), ("codex", True), ("claude-code", False)])
def test_cli_fixes_the_task_through_the_gateway_and_is_graded(cli, recorded_turns, tmp_path):
    if (reason := cli_missing(cli) or sandbox_missing()) is not None:
        pytest.skip(reason)
    task = generated_task(tmp_path / "task")
    rollout_id, patch = f"{cli}-1", task.instance["patch"]
    repo = attempt_dir(tmp_path, rollout_id) / REPO_DIR
    steps = claude_code_steps(repo, patch) if cli == "claude-code" else codex_steps(patch)
    upstream = EpisodeUpstream(Episode(steps))
    config = tmp_path / "gateway.yaml"
    config.write_text(f"recorded_turns: {str(recorded_turns).lower()}\n")
    gateway = InProcessGateway(tmp_path / "gateway.db", config).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            spec = RolloutSpec(id=rollout_id, group_id="g1", input=task_input(task, cli, TASK_OVERRIDES),
                               max_attempts=1)
            rollout = run_through_controller(gateway.url, spec, tmp_path, timeout_s=120)
            calls = admin.calls(rollout_id)
    finally:
        gateway.stop()
        upstream.close()
    assert rollout.state == RolloutState.SUCCEEDED, (rollout.error, harness_logs(tmp_path, rollout_id))
    assert summary_line(tmp_path, rollout_id)["exit_status"] == "Completed"
    assert [a for a in upstream.episode.answered if a.startswith("step")] == ["step 0", "step 1", "step 2"]
    assert "final" in upstream.episode.answered
    buggy, fixed = fix_of(patch)
    source = (repo / bug_file(patch)).read_text()
    assert fixed in source and buggy not in source
    assert rollout.reward == 1.0, rollout
    check_recorded(calls, CALL_KINDS[cli])
    built = built_samples(calls, "g1")
    main = [call for call in calls if not call.side]
    if recorded_turns:  # every call after the first continued the one before it on its recorded tokens
        assert (built.stats.samples, built.stats.calls_recorded_tokens) == (1, len(main) - 1), built.stats
        assert all(call.recorded_prefix == len(before.prompt_token_ids) + len(before.response_token_ids)
                   for before, call in zip(main, main[1:], strict=False)), [c.recorded_prefix for c in main]
    else:  # the Edit call, re-sent with replace_all: false, no longer renders as it was sampled
        assert built.stats.samples == 2, built.stats
        assert all(call.recorded_prefix is None for call in calls)
