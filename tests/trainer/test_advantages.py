"""Advantages: verl 0.9.1 reference values, rollout-level policy, failures, properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainer.verl_support import require_verl
from trainer.advantages import (
    AdvantageConfig,
    RolloutOutcome,
    grpo_advantages_R,
    reinforce_pp_baseline_advantages_R,
    rloo_advantages_R,
    sample_advantages,
)

# From ../shared/reference/verl-0.9.1-vectors.json (verl's own functions, rounded to 6 decimals).
VERL_GRPO = [
    ([1, 0, 0, 1], True, [0.866024, -0.866024, -0.866024, 0.866024]),
    ([1, 0, 0, 1], False, [0.5, -0.5, -0.5, 0.5]),
    ([1, 0, 0, 0], True, [1.499997, -0.499999, -0.499999, -0.499999]),
    ([1, 1, 1, 1], True, [0, 0, 0, 0]),
    ([0.7], True, [0.699999]),
]
VERL_RLOO = [
    ([1, 0, 0, 1], [0.666667, -0.666667, -0.666667, 0.666667]),
    ([1, 0, 0, 0], [1.0, -0.333333, -0.333333, -0.333333]),
]


@pytest.mark.parametrize(("rewards", "norm_by_std", "expected"), VERL_GRPO)
def test_grpo_matches_verl_reference(rewards, norm_by_std, expected):
    advantages_R = grpo_advantages_R(
        np.array(rewards, float), np.zeros(len(rewards), int), norm_by_std=norm_by_std, epsilon=1e-6
    )
    np.testing.assert_allclose(advantages_R, expected, atol=1.5e-6)


@pytest.mark.parametrize(("rewards", "expected"), VERL_RLOO)
def test_rloo_matches_verl_reference(rewards, expected):
    advantages_R = rloo_advantages_R(np.array(rewards, float), np.zeros(len(rewards), int))
    np.testing.assert_allclose(advantages_R, expected, atol=1e-6)


def test_groups_are_computed_independently():
    rewards_R = np.array([1, 0, 0, 1, 1, 0, 0, 0], float)
    group_R = np.array([0, 1, 1, 0, 1, 0, 0, 0])
    separate_R = np.empty(8)
    for g in (0, 1):
        separate_R[group_R == g] = grpo_advantages_R(
            rewards_R[group_R == g], np.zeros((group_R == g).sum(), int)
        )
    np.testing.assert_allclose(grpo_advantages_R(rewards_R, group_R), separate_R)


def test_reinforce_pp_baseline_is_whitened_group_centered_reward():
    advantages_R = reinforce_pp_baseline_advantages_R(np.array([1, 0, 2, 0], float), np.array([0, 0, 1, 1]))
    centered = np.array([0.5, -0.5, 1.0, -1.0])
    np.testing.assert_allclose(
        advantages_R, (centered - centered.mean()) / np.sqrt(centered.var(ddof=1) + 1e-8)
    )
    assert reinforce_pp_baseline_advantages_R(np.array([3.0]), np.array([0])).tolist() == [0.0]


def outcome(rid, group, reward, failure=None):
    return RolloutOutcome(rollout_id=rid, group_id=group, reward=reward, failure_kind=failure)


def test_rollout_level_broadcasts_each_rollouts_advantage_to_all_its_samples():
    outcomes = [
        outcome("a", "g", 1.0),
        outcome("b", "g", 0.0),
        outcome("c", "g", 0.0),
        outcome("d", "g", 1.0),
    ]
    result = sample_advantages(["a", "a", "a", "b", "d"], outcomes)  # c produced no sample: still a member
    np.testing.assert_allclose(
        result.advantages_S, [0.866024, 0.866024, 0.866024, -0.866024, 0.866024], atol=1.5e-6
    )
    assert result.keep_S.all()
    assert result.metrics["advantages/members"] == 4


def test_sample_level_counts_every_sample_as_a_member():
    outcomes = [outcome("a", "g", 1.0), outcome("b", "g", 0.0)]
    result = sample_advantages(
        ["a", "a", "a", "b"], outcomes, AdvantageConfig(level="sample", norm_by_std=False)
    )
    np.testing.assert_allclose(result.advantages_S, [0.25, 0.25, 0.25, -0.75])
    rollout = sample_advantages(["a", "a", "a", "b"], outcomes, AdvantageConfig(norm_by_std=False))
    np.testing.assert_allclose(rollout.advantages_S, [0.5, 0.5, 0.5, -0.5])


def test_infra_failures_are_excluded_and_agent_failures_count_with_reward_zero():
    outcomes = [outcome("a", "g", 1.0), outcome("b", "g", None, "agent"), outcome("c", "g", None, "infra")]
    result = sample_advantages(["a", "b", "c"], outcomes, AdvantageConfig(norm_by_std=False))
    np.testing.assert_allclose(result.advantages_S, [0.5, -0.5, 0.0])
    assert result.keep_S.tolist() == [True, True, False]
    assert result.metrics["advantages/rollouts_excluded_infra"] == 1
    assert result.metrics["advantages/rollouts_agent_failed"] == 1


def test_agent_failure_reward_is_configurable_or_excludes():
    outcomes = [outcome("a", "g", 1.0), outcome("b", "g", 0.5), outcome("c", "g", None, "agent")]
    penalised = sample_advantages(
        ["c"], outcomes, AdvantageConfig(norm_by_std=False, agent_failure_reward=-1.0)
    )
    np.testing.assert_allclose(penalised.advantages_S, [-1.0 - 0.5 / 3])
    excluded = sample_advantages(
        ["a", "c"], outcomes, AdvantageConfig(norm_by_std=False, agent_failure_reward=None)
    )
    np.testing.assert_allclose(excluded.advantages_S, [0.25, 0.0])
    assert excluded.keep_S.tolist() == [True, False]
    assert excluded.metrics["advantages/rollouts_excluded_agent"] == 1


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_pp_baseline"])
def test_zero_variance_groups_get_zero_advantage_and_can_be_filtered(estimator):
    outcomes = [
        outcome("a", "flat", 1.0),
        outcome("b", "flat", 1.0),
        outcome("c", "g", 1.0),
        outcome("d", "g", 0.0),
        outcome("e", "single", 0.7),
    ]
    ids = ["a", "b", "c", "d", "e"]
    kept = sample_advantages(ids, outcomes, AdvantageConfig(estimator=estimator))
    assert kept.advantages_S[[0, 1, 4]].tolist() == [0.0, 0.0, 0.0]
    assert kept.keep_S.all() and (kept.advantages_S[[2, 3]] != 0).all()
    assert kept.metrics["advantages/zero_variance_groups"] == 2
    filtered = sample_advantages(
        ids, outcomes, AdvantageConfig(estimator=estimator, filter_zero_variance=True)
    )
    assert filtered.keep_S.tolist() == [False, False, True, True, False]


def test_singleton_groups_differ_from_verl_deliberately():
    verl_like = grpo_advantages_R(np.array([0.7]), np.array([0]))
    ours = sample_advantages(["a"], [outcome("a", "g", 0.7)]).advantages_S
    assert verl_like[0] == pytest.approx(0.699999, abs=1e-6) and ours.tolist() == [0.0]


@pytest.mark.parametrize(
    ("ids", "outcomes", "message"),
    [
        (["x"], [outcome("a", "g", 1.0)], "no RolloutOutcome"),
        (["a"], [outcome("a", "g", None)], "without a reward"),
        (["a"], [outcome("a", "g", 1.0), outcome("a", "g", 0.0)], "two outcomes"),
        (["a"], [outcome("a", "g", 1.0, "oom")], "failure_kind='oom'"),
    ],
)
def test_bad_inputs_are_rejected_with_the_offending_rollout(ids, outcomes, message):
    with pytest.raises(ValueError, match=message):
        sample_advantages(ids, outcomes)


@pytest.mark.parametrize("config", [{"estimator": "ppo"}, {"level": "token"}, {"epsilon": -1.0}])
def test_invalid_config_is_rejected(config):
    with pytest.raises(ValueError, match="AdvantageConfig"):
        AdvantageConfig(**config)


group_strategy = st.lists(
    st.tuples(
        st.sampled_from(["g0", "g1", "g2"]),
        st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        st.sampled_from([None, None, None, "agent", "infra"]),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=16,
)
configs = st.builds(
    AdvantageConfig,
    estimator=st.sampled_from(["grpo", "rloo", "reinforce_pp_baseline"]),
    norm_by_std=st.booleans(),
    filter_zero_variance=st.booleans(),
)


def build(rows):
    outcomes = [
        outcome(f"r{i}", g, None if failure else reward, failure)
        for i, (g, reward, failure, _) in enumerate(rows)
    ]
    return outcomes, [f"r{i}" for i, row in enumerate(rows) for _ in range(row[3])]


def per_rollout(result, ids):
    return {
        rid: (float(a), bool(k)) for rid, a, k in zip(ids, result.advantages_S, result.keep_S, strict=True)
    }


@settings(max_examples=150, deadline=None)
@given(group_strategy, configs, st.randoms(use_true_random=False))
def test_rollout_advantages_are_invariant_to_permuting_rollouts(rows, config, rng):
    outcomes, ids = build(rows)
    reference = per_rollout(sample_advantages(ids, outcomes, config), ids)
    rng.shuffle(outcomes)
    rng.shuffle(ids)
    permuted = per_rollout(sample_advantages(ids, outcomes, config), ids)
    assert permuted.keys() == reference.keys()
    for rid, (advantage, keep) in reference.items():
        assert permuted[rid][0] == pytest.approx(advantage, abs=1e-9) and permuted[rid][1] == keep


@settings(max_examples=150, deadline=None)
@given(group_strategy, configs)
def test_rollout_advantages_are_invariant_to_how_many_samples_a_rollout_split_into(rows, config):
    outcomes, ids = build(rows)
    one_each = [o.rollout_id for o in outcomes]
    reference = per_rollout(sample_advantages(one_each, outcomes, config), one_each)
    split = per_rollout(sample_advantages(ids, outcomes, config), ids)
    for rid, value in split.items():
        assert value[0] == pytest.approx(reference[rid][0], abs=1e-12) and value[1] == reference[rid][1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=10))
def test_grpo_and_rloo_center_each_group(rewards):
    rewards_R = np.array(rewards)
    zeros_R = np.zeros(len(rewards), int)
    assert grpo_advantages_R(rewards_R, zeros_R).sum() == pytest.approx(0.0, abs=1e-6)
    assert rloo_advantages_R(rewards_R, zeros_R).sum() == pytest.approx(0.0, abs=1e-9)


def test_matches_verl_on_random_inputs():
    core_algos = require_verl("verl.trainer.ppo.core_algos")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    rewards_R = rng.integers(0, 3, size=32).astype(np.float32)
    group_R = rng.integers(0, 5, size=32)
    token_rewards = torch.zeros(32, 4)
    token_rewards[:, -1] = torch.from_numpy(rewards_R)
    mask = torch.ones(32, 4)
    index = np.array([f"g{g}" for g in group_R], dtype=object)
    for norm in (True, False):
        verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
            token_rewards, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=norm
        )
        np.testing.assert_allclose(
            grpo_advantages_R(rewards_R, group_R, norm_by_std=norm), verl_adv[:, 0].numpy(), atol=1e-5
        )
    verl_rloo, _ = core_algos.compute_rloo_outcome_advantage(token_rewards, mask, index)
    np.testing.assert_allclose(rloo_advantages_R(rewards_R, group_R), verl_rloo[:, 0].numpy(), atol=1e-5)


# Groups [0, 1], [0, 1] and the one-member group [5] (issue 14): only the two groups with variance are whitened,
# centered [-0.5, 0.5, -0.5, 0.5] -> mean 0, Bessel std sqrt(1/3) -> +-0.866025; the singleton gets 0.
REINFORCE_PP_CASES = [
    ([0, 1, 0, 1, 5], [0, 0, 1, 1, 2], [-0.866025, 0.866025, -0.866025, 0.866025, 0.0]),
    ([0, 1, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2], [-0.866025, 0.866025, -0.866025, 0.866025, 0.0, 0.0]),
    ([1, 0, 2, 0], [0, 0, 1, 1], [0.547723, -0.547723, 1.095445, -1.095445]),
    ([3.0], [0], [0.0]),
    ([1, 1, 2, 2], [0, 0, 1, 1], [0.0, 0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize(("rewards", "groups", "expected"), REINFORCE_PP_CASES)
def test_reinforce_pp_baseline_whitens_over_groups_with_variance_only(rewards, groups, expected):
    advantages_R = reinforce_pp_baseline_advantages_R(np.array(rewards, float), np.array(groups))
    np.testing.assert_allclose(advantages_R, expected, atol=1e-5)


def test_reinforce_pp_baseline_winners_stay_positive_beside_a_one_member_group():
    outcomes = [outcome("a", "g1", 0.0), outcome("b", "g1", 1.0), outcome("c", "g2", 0.0),
                outcome("d", "g2", 1.0), outcome("e", "g3", 5.0)]
    result = sample_advantages(list("abcde"), outcomes, AdvantageConfig(estimator="reinforce_pp_baseline"))
    np.testing.assert_allclose(result.advantages_S, [-0.866025, 0.866025, -0.866025, 0.866025, 0.0], atol=1e-5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, 3.0])), min_size=1, max_size=12),
       st.floats(-10, 10), st.floats(0.5, 3))
def test_reinforce_pp_baseline_ignores_flat_groups(rows, flat_reward, extra_size):
    """Adding a group without variance (any size, any reward) changes no other member's advantage."""
    rewards_R = np.array([r for _, r in rows])
    group_R = np.array([g for g, _ in rows])
    base_R = reinforce_pp_baseline_advantages_R(rewards_R, group_R)
    size = int(extra_size)
    with_flat_R = reinforce_pp_baseline_advantages_R(
        np.concatenate([rewards_R, np.full(size, flat_reward)]), np.concatenate([group_R, np.full(size, 9)])
    )
    np.testing.assert_allclose(with_flat_R[: len(rows)], base_R, atol=1e-9)
    assert (with_flat_R[len(rows):] == 0).all()


def test_reinforce_pp_baseline_matches_verl_when_every_group_has_variance():
    """verl whitens over tokens and lets singletons and flat groups in; with one token per response and
    only groups with variance the two agree (our deliberate difference is what it does with the others)."""
    core_algos = require_verl("verl.trainer.ppo.core_algos")
    torch = pytest.importorskip("torch")
    rewards_R = np.array([0, 1, 0, 1, 2, 0, 1, 1, 0.5], np.float32)
    group_R = np.array([0, 0, 1, 1, 2, 2, 3, 3, 3])
    token_rewards = torch.from_numpy(rewards_R)[:, None]
    index = np.array([f"g{g}" for g in group_R], dtype=object)
    verl_adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_rewards, torch.ones(len(rewards_R), 1), index
    )
    np.testing.assert_allclose(
        reinforce_pp_baseline_advantages_R(rewards_R, group_R), verl_adv[:, 0].numpy(), atol=1e-5
    )
