"""Each real coding CLI once in front of the real embedded engine, run by the controller (LocalRunner sandbox, grading)
through the gateway: a random-weight model (the `tiny` variant of `cli_long_model.py`, whose context holds the CLI's
prompt) need not solve anything; the episode ends cleanly, every call is recorded with the engine's token IDs, the
samples build, and the grader scores the untouched repository 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.embedded import EmbeddedEngine
from gateway.client import GatewayClient
from gateway.records import RolloutSpec, RolloutState
from recipes.cli_harness.launch import DEFAULTS
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from tests.recipes.cli_long_model import build_long_tiny
from tests.recipes.cli_support import (
    CALL_KINDS,
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

pytestmark = pytest.mark.slow  # an engine process and a real CLI per test
SERVED_NAME = "policy"
TASK_OVERRIDES = {"model": SERVED_NAME, "step_limit": 3, "max_tokens": 32, "command_timeout_s": 30}


@pytest.fixture(scope="module")
def long_engine(tiny_model_dir: Path, tmp_path_factory) -> str:
    """The embedded engine serving the long-context tiny variant as `policy`; its root URL."""
    model_dir = tmp_path_factory.mktemp("long-tiny")
    assert build_long_tiny(tiny_model_dir, model_dir) > 0.1  # its answers end within a few tokens
    engine = EmbeddedEngine(model_dir, served_model_name=SERVED_NAME, max_batch_size=4)
    engine.start()
    yield engine.base_url
    engine.stop()


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_cli_episode_on_the_engine_ends_cleanly_and_is_recorded(cli, long_engine, tmp_path):
    if (reason := cli_missing(cli) or sandbox_missing()) is not None:
        pytest.skip(reason)
    task = generated_task(tmp_path / "task")
    rollout_id = f"{cli}-e"
    gateway = InProcessGateway(tmp_path / "gateway.db").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model(SERVED_NAME, long_engine + "/v1")
            spec = RolloutSpec(id=rollout_id, group_id="g", input=task_input(task, cli, TASK_OVERRIDES),
                               max_attempts=1)
            rollout = run_through_controller(gateway.url, spec, tmp_path, timeout_s=240)
            calls = admin.calls(rollout_id)
    finally:
        gateway.stop()
    assert rollout.state == RolloutState.SUCCEEDED, (rollout.error, harness_logs(tmp_path, rollout_id))
    assert summary_line(tmp_path, rollout_id)["exit_status"] in ("Completed", "LimitsExceeded")
    check_recorded(calls, CALL_KINDS[cli])
    named = DEFAULTS["codex_model"] if cli == "codex" else SERVED_NAME  # Codex's own name, served by the policy
    assert all(call.model == named for call in calls)
    assert max(len(call.prompt_token_ids) for call in calls) > 4096  # the CLI's prompt: past tiny's own context
    built_samples(calls, "g")
    assert rollout.reward == 0.0
