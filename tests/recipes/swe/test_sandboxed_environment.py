"""The environment both SWE harnesses give mini-swe-agent: commands through the sandbox, no secrets in templates."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from recipes.swe.harness import sandboxed_environment


@dataclass(frozen=True)
class Result:
    output: str
    returncode: int
    timed_out: bool = False


def test_commands_go_through_run_and_the_rollout_key_stays_out_of_the_templates(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "rk-secret-of-this-rollout")
    ran = []

    def run(command, cwd, timeout_s):
        ran.append((command, cwd, timeout_s))
        return Result("slow\n", -9, timed_out=True) if command == "sleep 9" else Result("hi\n", 0)

    environment = sandboxed_environment(run, "/testbed", 20)
    assert environment.execute({"command": "echo hi"}) == {"output": "hi\n", "returncode": 0, "exception_info": ""}
    timed_out = environment.execute({"command": "sleep 9"}, timeout=3)
    assert timed_out["exception_info"] == "The command timed out after 3 s and was killed."
    assert ran == [("echo hi", "/testbed", 20), ("sleep 9", "/testbed", 3)]
    variables = environment.get_template_vars()
    assert variables["cwd"] == "/testbed" and "system" in variables
    assert "OPENAI_API_KEY" not in variables and "rk-secret-of-this-rollout" not in repr(variables)


def test_the_submit_line_ends_the_episode():
    from minisweagent.exceptions import Submitted

    environment = sandboxed_environment(lambda *_: Result("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndone\n", 0), "/w", 5)
    with pytest.raises(Submitted):
        environment.execute({"command": "submit"})
