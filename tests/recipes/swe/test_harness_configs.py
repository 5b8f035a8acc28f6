"""The SWE harness's mini-swe-agent configurations by name: the default is mini-swe-agent's own file, `one_command` is
the project's short one; both are read by mini-swe-agent's own classes, and answers parse with each one's regex."""

from __future__ import annotations

import pytest

from recipes.swe.harness_configs import (
    DEFAULT_CONFIG,
    MINI_SWE_AGENT_ACTION_REGEX,
    action_regex,
    config_names,
    config_path,
    load_harness_config,
)

COMMAND = "sed -i '3s|.*|    return x|' m.py"


def parse(name: str, answer: str) -> list[dict]:
    """The actions mini-swe-agent's text-based parser takes from `answer` under configuration `name`."""
    from minisweagent.models.utils.actions_text import parse_regex_actions

    model = load_harness_config(name)["model"]
    return parse_regex_actions(answer, action_regex=action_regex(name),
                               format_error_template=model["format_error_template"],
                               template_kwargs={"finish_reason": "stop"})


def test_the_default_is_mini_swe_agents_own_textbased_file():
    assert config_path(DEFAULT_CONFIG).parts[-3:] == ("minisweagent", "config", "mini_textbased.yaml")
    assert action_regex(DEFAULT_CONFIG) == MINI_SWE_AGENT_ACTION_REGEX
    assert "mswea_bash_command" in load_harness_config(DEFAULT_CONFIG)["agent"]["system_template"]


def test_one_command_is_short_and_mini_swe_agents_agent_reads_it():
    from minisweagent.agents.default import AgentConfig

    config = load_harness_config("one_command")
    agent = AgentConfig(**config["agent"])
    assert "{{task}}" in agent.instance_template and len(agent.system_template) < 300
    assert len(agent.system_template + agent.instance_template) < len(
        (lambda c: c["system_template"] + c["instance_template"])(load_harness_config(DEFAULT_CONFIG)["agent"])) / 10


@pytest.mark.parametrize("answer", [f"```bash\n{COMMAND}\n```", f"Run this:\n```sh\n{COMMAND}\n```\nDone.",
                                    f"```\n{COMMAND}\n```", f"```shell \n{COMMAND}\n```"])
def test_one_command_takes_a_bash_sh_or_bare_fence(answer):
    assert parse("one_command", answer) == [{"command": COMMAND}]


@pytest.mark.parametrize("answer, found", [(f"```python\n{COMMAND}\n```", 0), (COMMAND, 0),
                                           (f"```bash\nls\n```\nthen\n```bash\n{COMMAND}\n```", 2)])
def test_one_command_rejects_other_fences_no_fence_and_two_commands_with_its_own_message(answer, found):
    from minisweagent.exceptions import FormatError

    with pytest.raises(FormatError) as error:
        parse("one_command", answer)
    message = error.value.messages[0]["content"]
    assert "```bash" in message and f"found {found}" in message


def test_the_default_does_not_take_a_bash_fence_and_one_command_does_not_take_mini_swe_agents():
    from minisweagent.exceptions import FormatError

    with pytest.raises(FormatError):
        parse(DEFAULT_CONFIG, f"```bash\n{COMMAND}\n```")
    assert parse(DEFAULT_CONFIG, f"```mswea_bash_command\n{COMMAND}\n```") == [{"command": COMMAND}]
    with pytest.raises(FormatError):
        parse("one_command", f"```mswea_bash_command\n{COMMAND}\n```")


def test_an_unknown_name_lists_the_choices():
    assert config_names() == sorted([DEFAULT_CONFIG, "one_command"])
    with pytest.raises(ValueError, match=r"harness_config='../x' is not .* use one of \['mini_textbased', 'one_"):
        config_path("../x")
