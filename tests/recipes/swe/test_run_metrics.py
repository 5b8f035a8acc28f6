"""SWE run metrics from recorded conversations: the action-format rate (mini-swe-agent's own rule) and per-level rates;
and the training flow's stratified split of ladder tasks."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from recipes.swe.run_metrics import (
    ACTION_REGEX,
    action_format_metrics,
    action_parsed,
    level_format_metrics,
    level_metrics,
    rollout_format_shares,
    swe_rollout_metrics,
)
from rollouts.task_data import split_rows
from tests.trainer.loop_support import call, group

GOOD = "THOUGHT: fix line 2.\n\n```mswea_bash_command\nsed -i '2s|.*|    if x < 0:|' m.py\n```"
TWO_ACTIONS = "```mswea_bash_command\nls\n```\nthen\n```mswea_bash_command\ncat m.py\n```"
NO_FENCE = "I would run sed -i on m.py."
WRONG_FENCE = "```bash\nls\n```"


def test_the_regex_is_mini_swe_agents_own():
    """Read from mini-swe-agent's source (importing it loads litellm: slow)."""
    origin = importlib.util.find_spec("minisweagent").origin
    source = (Path(origin).parent / "models" / "litellm_textbased_model.py").read_text()
    defaults = {node.target.id: ast.literal_eval(node.value) for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None}
    assert defaults["action_regex"] == ACTION_REGEX


@pytest.mark.parametrize("text, parsed", [(GOOD, True), (TWO_ACTIONS, False), (NO_FENCE, False),
                                          (WRONG_FENCE, False), ("", False), (None, False),
                                          ("```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
                                           True)])
def test_an_action_parses_when_it_holds_exactly_one_fenced_command(text, parsed):
    assert action_parsed(text) is parsed


def test_format_rate_counts_the_agents_turns_of_the_final_attempt_only():
    conversation = {  # rollout -> its recorded calls, as the gateway stored them
        "a": (call("a", 0, response_text=GOOD), call("a", 1, response_text=TWO_ACTIONS),
              call("a", 2, response_text=GOOD)),
        "b": (call("b", 0, response_text=NO_FENCE, attempt=0),  # an earlier attempt: not a turn of the rollout
              call("b", 1, response_text=WRONG_FENCE), call("b", 2, response_text=GOOD, side=True),
              call("b", 3, response_text=None, status="error", http_status=502, error="upstream")),
    }
    groups = [group("g", {"a": 1.0, "b": 0.0}, calls=lambda rid: conversation[rid])]
    assert action_format_metrics(groups, "rollout") == {"rollout/action_format_rate": 2 / 4,
                                                        "rollout/agent_turns": 4.0}
    assert action_format_metrics([group("g", [1.0], calls=lambda rid: ())], "val") == {}


def test_format_shares_per_rollout_count_its_final_attempts_turns_with_its_configs_regex():
    conversation = {
        "a": (call("a", 0, response_text=GOOD), call("a", 1, response_text=TWO_ACTIONS),
              call("a", 2, response_text=GOOD), call("a", 3, response_text=NO_FENCE)),
        "b": (call("b", 0, response_text=GOOD, attempt=0), call("b", 1, response_text=GOOD, side=True),
              call("b", 2, response_text=NO_FENCE)),
        "c": (),  # failed before its first call: no turn, share 0
    }
    one_command = {"d": (call("d", 0, response_text=WRONG_FENCE),), "e": (call("e", 0, response_text=GOOD),)}
    groups = [group("g", {"a": 0.0, "b": 0.0, "c": None}, calls=lambda rid: conversation[rid]),
              group("h", {"d": 0.0, "e": 0.0}, calls=lambda rid: one_command[rid],
                    task={"harness_config": "one_command"})]
    assert rollout_format_shares(groups) == {"a": 2 / 4, "b": 0.0, "c": 0.0, "d": 1.0, "e": 0.0}


def test_each_group_is_parsed_with_the_regex_of_the_harness_config_it_ran_with():
    """A ```bash answer is an action under `one_command` and a format error under the default, and the reverse."""
    answers = {"a": (call("a", 0, response_text=WRONG_FENCE),), "b": (call("b", 0, response_text=GOOD),)}
    one_command = group("g1", {"a": 0.0, "b": 0.0}, calls=lambda rid: answers[rid],
                        task={"harness_config": "one_command"})
    default = group("g2", {"a": 0.0, "b": 0.0}, calls=lambda rid: answers[rid], task={"level": 0})
    assert action_format_metrics([one_command], "rollout")["rollout/action_format_rate"] == 1 / 2
    assert action_format_metrics([default], "rollout")["rollout/action_format_rate"] == 1 / 2
    fenced = {"a": (call("a", 0, response_text=WRONG_FENCE),), "b": (call("b", 0, response_text=WRONG_FENCE),)}
    assert action_format_metrics([group("g3", {"a": 0.0, "b": 0.0}, calls=lambda rid: fenced[rid],
                                        task={"harness_config": "one_command"}),
                                  group("g4", {"a": 0.0, "b": 0.0}, calls=lambda rid: fenced[rid])],
                                 "rollout") == {"rollout/action_format_rate": 2 / 4, "rollout/agent_turns": 4.0}


def test_level_rates_per_task_level_and_nothing_for_tasks_without_one():
    groups = [group("g0", [1.0, 0.0, 1.0, 1.0], task={"level": 0}), group("g1", [0.0, 0.0], task={"level": 1}),
              group("g0b", [0.0, None], task={"level": 0}), group("if", [1.0], task={"id": "x"})]
    metrics = level_metrics(groups, 1.0, "val")
    assert metrics == {"val/level0/rollouts": 5.0, "val/level0/pass_rate": 3 / 5, "val/level0/reward_mean": 3 / 5,
                       "val/level1/rollouts": 2.0, "val/level1/pass_rate": 0.0, "val/level1/reward_mean": 0.0}
    with_format = swe_rollout_metrics(groups, 1.0, "rollout", mini_swe_agent=True)
    assert with_format["rollout/action_format_rate"] == 0.0  # loop_support's calls answer "x": no action
    assert "rollout/action_format_rate" not in swe_rollout_metrics(groups, 1.0, "rollout", mini_swe_agent=False)


def test_a_level_rate_counts_agent_failures_and_leaves_infrastructure_failures_out():
    timed_out = group("g", {"a": 1.0, "b": None, "c": None}, failures={"b": "agent", "c": "infra"},
                      task={"level": 2})
    assert level_metrics([timed_out], 1.0, "val") == {"val/level2/rollouts": 2.0, "val/level2/pass_rate": 0.5,
                                                      "val/level2/reward_mean": 0.5}


def test_validation_rows_are_drawn_from_every_level_in_proportion():
    rows = [{"id": f"t{i}", "level": level} for i, level in enumerate([0] * 8 + [1] * 4 + [3] * 4)]
    train, val = split_rows(rows, 4, seed=0, stratify="level")
    assert sorted(r["level"] for r in val) == [0, 0, 1, 3]
    assert {r["id"] for r in train}.isdisjoint(r["id"] for r in val) and len(train) == 12
    assert split_rows(rows, 4, seed=0, stratify="level") == (train, val)
    plain = [{"id": f"t{i}"} for i in range(16)]
    assert split_rows(plain, 4, seed=3, stratify="level") == split_rows(plain, 4, seed=3)  # one stratum: as before


def test_format_rate_per_level_separates_the_rate_from_the_mix_of_levels():
    """Two batches with the same per-level rates but different mixes: the overall rate moves, the per-level ones not."""
    answers = {"good": (call("good", 0, response_text=GOOD),), "bad": (call("bad", 0, response_text=NO_FENCE),)}

    def batch(level3_groups: int) -> list:
        level0 = [group(f"a{i}", {"good": 0.0, "bad": 0.0}, calls=lambda rid: answers[rid], task={"level": 0})
                  for i in range(2)]  # rate 1/2
        level3 = [group(f"b{i}", {"bad": 0.0}, calls=lambda rid: answers[rid], task={"level": 3})
                  for i in range(level3_groups)]  # rate 0
        return level0 + level3 + [group("x", {"good": 0.0}, calls=lambda rid: answers[rid])]  # no level

    for level3_groups, overall in [(0, 3 / 5), (4, 3 / 9)]:
        metrics = swe_rollout_metrics(batch(level3_groups), 1.0, "rollout", mini_swe_agent=True)
        assert metrics["rollout/action_format_rate"] == overall
        assert metrics["rollout/level0/action_format_rate"] == 1 / 2
        assert metrics["rollout/level0/agent_turns"] == 4.0
    assert level_format_metrics(batch(4), "val") == {
        "val/level0/action_format_rate": 1 / 2, "val/level0/agent_turns": 4.0,
        "val/level3/action_format_rate": 0.0, "val/level3/agent_turns": 4.0}
    assert level_format_metrics(batch(0)[-1:], "val") == {}  # tasks without a level: nothing
