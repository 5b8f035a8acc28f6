"""Metrics of SWE rollouts beyond the reward: the action-format success rate and the pass rate per ladder level.

The action-format rate is read from the gateway's call records (the harness's own turns as the engine answered them):
the share of the agent's turns whose answer mini-swe-agent parses as an action, i.e. holds exactly one
```mswea_bash_command fenced block (its text-based `action_regex`). Side calls and failed calls are not turns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agents.swe.ladder import instance_level
from gateway.records import CallRecord
from trainer.rollout_groups import FinishedGroup

ACTION_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"  # mini-swe-agent's LitellmTextbasedModelConfig.action_regex


def action_parsed(text: str | None) -> bool:
    """Whether mini-swe-agent takes `text` as an action: exactly one fenced `mswea_bash_command` block."""
    return text is not None and len(re.findall(ACTION_REGEX, text, re.DOTALL)) == 1


def agent_turns(group: FinishedGroup) -> list[CallRecord]:
    """The agent's turns of a group: its rollouts' final-attempt calls that reached the model (no side calls)."""
    attempts = {rollout.id: rollout.attempt for rollout in group.rollouts}
    return [call for rollout_id, calls in group.calls.items() for call in calls
            if call.attempt == attempts.get(rollout_id) and not call.side and call.status == "ok"]


def action_format_metrics(groups: Iterable[FinishedGroup], prefix: str) -> dict[str, float]:
    """`{prefix}/action_format_rate` (share of turns with a parsed action) and `{prefix}/agent_turns`; no rate
    without turns (e.g. groups fetched without their calls)."""
    turns = [call for group in groups for call in agent_turns(group)]
    if not turns:
        return {}
    parsed = sum(action_parsed(call.response_text) for call in turns)
    return {f"{prefix}/action_format_rate": parsed / len(turns), f"{prefix}/agent_turns": float(len(turns))}


def level_metrics(groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str) -> dict[str, float]:
    """Per ladder level of the groups' tasks: `{prefix}/level{L}/pass_rate`, `/reward_mean` and `/rollouts`
    (graded rollouts only); nothing for tasks without a level (other recipes)."""
    rewards: dict[int, list[float]] = {}
    for group in groups:
        if group.task.get("level") is None:
            continue
        level = instance_level(group.task)
        rewards.setdefault(level, []).extend(r.reward for r in group.rollouts if r.reward is not None)
    metrics: dict[str, float] = {}
    for level, values in sorted(rewards.items()):
        name = f"{prefix}/level{level}"
        metrics[f"{name}/rollouts"] = float(len(values))
        if values:
            metrics[f"{name}/pass_rate"] = sum(v >= pass_threshold for v in values) / len(values)
            metrics[f"{name}/reward_mean"] = sum(values) / len(values)
    return metrics


def swe_rollout_metrics(groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str, *,
                        mini_swe_agent: bool) -> dict[str, float]:
    """The per-level rates of a batch (or validation pass) of groups and, when mini-swe-agent was the harness, its
    action-format rate."""
    formats = action_format_metrics(groups, prefix) if mini_swe_agent else {}
    return {**formats, **level_metrics(groups, pass_threshold, prefix)}
