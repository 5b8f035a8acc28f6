"""The agent's diff in a sandbox of its own (`recipes/swe/agent_diff.py`): the limits it names are the agent's
failure."""

from __future__ import annotations

import pytest

from recipes.swe import agent_diff
from recipes.swe.agent_diff import AgentDiffError


def _trees(tmp_path, size: int):
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    (before / "mod.py").write_text("x = 1\n")
    (after / "mod.py").write_text("x = 1\n" + "# more\n" * size)
    return before, after


def test_the_diff_comes_back_whole(tmp_path):
    before, after = _trees(tmp_path, 3)
    assert agent_diff.agent_diff(before, after).count("+# more") == 3


def test_a_diff_over_the_output_cap_is_the_agents_failure(tmp_path, monkeypatch):
    before, after = _trees(tmp_path, 1_000)
    monkeypatch.setattr(agent_diff, "MAX_PATCH_BYTES", 1_000)
    with pytest.raises(AgentDiffError, match="is over 1000 bytes"):
        agent_diff.agent_diff(before, after)


def test_a_diff_past_its_time_is_the_agents_failure(tmp_path):
    before, after = _trees(tmp_path, 3)
    with pytest.raises(AgentDiffError, match="took longer than"):
        agent_diff.agent_diff(before, after, timeout_s=0.001)
