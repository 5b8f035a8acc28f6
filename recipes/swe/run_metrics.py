"""Metrics of SWE rollouts beyond the reward: the action-format success rate and the pass rate per ladder level.

The action-format rate is read from the gateway's call records (the harness's own turns as the engine answered them):
the share of the agent's turns whose answer mini-swe-agent parses as an action, i.e. holds exactly one match of the
`action_regex` of the configuration the rollout ran with (the task's `harness_config`: ```mswea_bash_command fenced
blocks by default, harness_configs.py). Side calls and failed calls are not turns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gateway.records import CallRecord
from recipes.swe.harness_configs import DEFAULT_CONFIG, MINI_SWE_AGENT_ACTION_REGEX, action_regex
from recipes.swe.ladder import instance_level
from rollouts.groups import FinishedGroup, scored_reward

ACTION_REGEX = MINI_SWE_AGENT_ACTION_REGEX  # the default configuration's


def parsed_action(text: str | None, regex: str = ACTION_REGEX) -> str | None:
    """The action mini-swe-agent takes from `text`: the one match of `regex` (default: one fenced
    `mswea_bash_command` block); None with no match or several."""
    found = [] if text is None else re.findall(regex, text, re.DOTALL)
    return found[0] if len(found) == 1 else None


def action_parsed(text: str | None, regex: str = ACTION_REGEX) -> bool:
    """Whether mini-swe-agent takes `text` as an action (`parsed_action`)."""
    return parsed_action(text, regex) is not None


def group_action_regex(group: FinishedGroup) -> str:
    """The action regex of the harness configuration the group's rollouts ran with (their task's `harness_config`)."""
    return action_regex(str(group.task.get("harness_config") or DEFAULT_CONFIG))


def agent_turns(group: FinishedGroup) -> list[CallRecord]:
    """The agent's turns of a group: its rollouts' final-attempt calls that reached the model (no side calls)."""
    attempts = {rollout.id: rollout.attempt for rollout in group.rollouts}
    return [call for rollout_id, calls in group.calls.items() for call in calls
            if call.attempt == attempts.get(rollout_id) and not call.side and call.status == "ok"]


def parsed_turns(group: FinishedGroup) -> dict[str, list[bool]]:
    """Per rollout of `group` (every member, turns or not): whether each of its agent turns holds a parsed action,
    with the regex of the harness configuration the group ran with."""
    regex = group_action_regex(group)
    turns: dict[str, list[bool]] = {rollout.id: [] for rollout in group.rollouts}
    for call in agent_turns(group):
        turns.setdefault(call.rollout_id, []).append(action_parsed(call.response_text, regex))
    return turns


def action_format_metrics(groups: Iterable[FinishedGroup], prefix: str) -> dict[str, float]:
    """`{prefix}/action_format_rate` (share of turns with a parsed action) and `{prefix}/agent_turns`; no rate
    without turns (e.g. groups fetched without their calls)."""
    turns = [parsed for group in groups for per_rollout in parsed_turns(group).values() for parsed in per_rollout]
    if not turns:
        return {}
    return {f"{prefix}/action_format_rate": sum(turns) / len(turns), f"{prefix}/agent_turns": float(len(turns))}


def rollout_format_shares(groups: Iterable[FinishedGroup]) -> dict[str, float]:
    """Per rollout of `groups`: the share of its agent turns with a parsed action (the training format term's
    input, trainer.format_reward); 0 for a rollout without a turn."""
    return {rollout_id: sum(parsed) / len(parsed) if parsed else 0.0
            for group in groups for rollout_id, parsed in parsed_turns(group).items()}


def groups_by_level(groups: Iterable[FinishedGroup]) -> dict[int, list[FinishedGroup]]:
    """The groups by the ladder level of their task, levels in ascending order; tasks without a level (other
    recipes) are left out."""
    by_level: dict[int, list[FinishedGroup]] = {}
    for group in groups:
        if group.task.get("level") is not None:
            by_level.setdefault(instance_level(group.task), []).append(group)
    return dict(sorted(by_level.items()))


def level_metrics(groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str) -> dict[str, float]:
    """Per ladder level of the groups' tasks: `{prefix}/level{L}/pass_rate`, `/reward_mean` and `/rollouts`
    (every rollout but the infrastructure's failures, an agent failure at 0: `rollouts.groups.scored_reward`); nothing
    for tasks without a level (other recipes)."""
    metrics: dict[str, float] = {}
    for level, members in groups_by_level(groups).items():
        scored = [scored_reward(r) for group in members for r in group.rollouts]
        values = [value for value in scored if value is not None]
        name = f"{prefix}/level{level}"
        metrics[f"{name}/rollouts"] = float(len(values))
        if values:
            metrics[f"{name}/pass_rate"] = sum(v >= pass_threshold for v in values) / len(values)
            metrics[f"{name}/reward_mean"] = sum(values) / len(values)
    return metrics


def level_format_metrics(groups: Sequence[FinishedGroup], prefix: str) -> dict[str, float]:
    """Per ladder level of the groups' tasks: `{prefix}/level{L}/action_format_rate` and `/agent_turns`, so that a
    change in the rate can be told apart from a change in the batch's mix of levels; nothing for tasks without one."""
    metrics: dict[str, float] = {}
    for level, members in groups_by_level(groups).items():
        metrics.update(action_format_metrics(members, f"{prefix}/level{level}"))
    return metrics


def swe_rollout_metrics(groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str, *,
                        mini_swe_agent: bool) -> dict[str, float]:
    """The per-level rates of a batch (or validation pass) of groups and, when mini-swe-agent was the harness, its
    action-format rate, overall and per level."""
    formats = {**action_format_metrics(groups, prefix), **level_format_metrics(groups, prefix)} if mini_swe_agent \
        else {}
    return {**formats, **level_metrics(groups, pass_threshold, prefix)}
