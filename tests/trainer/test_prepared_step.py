"""Groups → TrainBatch: rollout-level advantages, whole rollouts kept, no-signal batches reported as such."""

from __future__ import annotations

from gateway.records import CallRecord
from tests.trainer.loop_support import call, group, rollout
from trainer.advantages import AdvantageConfig
from trainer.losses import LossDenominators
from trainer.prepared_step import prepare_step, reward_metrics
from trainer.samples import SampleLimits

PROMPT = [1, 2, 3]


def two_samples(rid: str) -> tuple[CallRecord, ...]:
    """Two calls; the second does not extend the first (a new sample): the rollout has two samples."""
    return call(rid, 0, 0, [7, 8], prompt=PROMPT), call(rid, 1, 0, [9], prompt=[4, 5])


def test_rollout_level_advantages_reach_every_sample_of_a_rollout():
    built = prepare_step([group("g", {"a": 1.0, "b": 0.0}, calls=two_samples)], AdvantageConfig(), SampleLimits())
    assert built.batch is not None and not built.no_signal
    by_rollout = {}
    for sample, advantage in zip(built.batch.samples, built.batch.advantages_S, strict=True):
        by_rollout.setdefault(sample.rollout_id, set()).add(round(float(advantage), 6))
    # GRPO: (r - mean) / unbiased std = +-0.5 / 0.7071; one value per rollout, on both of its samples
    expected = round(0.5 / (0.5**0.5 + 1e-6), 6)  # epsilon 1e-6 in the denominator, as verl
    assert by_rollout == {"a": {expected}, "b": {-expected}} and len(built.batch.samples) == 4
    m = built.metrics
    assert m["rollout/reward_mean"] == 0.5 and m["rollout/pass_rate"] == 0.5 and m["rollout/groups"] == 1.0
    assert m["samples/samples_per_rollout_mean"] == 2.0 and m["advantages/groups_with_signal"] == 1.0


def test_every_rollout_taken_into_the_batch_counts_in_the_loss_denominators_as_in_verl():
    """A flat group's rollouts (advantage 0) stay in the batch, so rollout-token-mean divides by all 4 rollouts,
    not by the 2 with signal: the step per rollout does not swing with how many groups had variance."""
    flat = group("flat", {"a": 1.0, "b": 1.0}, calls=two_samples)
    mixed = group("mixed", {"c": 1.0, "d": 0.0}, calls=two_samples)
    built = prepare_step([flat, mixed], AdvantageConfig(), SampleLimits())
    assert {s.rollout_id for s in built.batch.samples} == {"a", "b", "c", "d"}
    denominators = LossDenominators.from_sequences([s.rollout_id for s in built.batch.samples],
                                                   [s.num_trainable_tokens for s in built.batch.samples])
    assert denominators.rollouts == 4 and denominators.token_weight("rollout-token-mean", "c", 2) == 1 / (3 * 4)
    assert built.metrics["advantages/zero_variance_groups"] == 1.0
    assert built.metrics["batch/rollouts"] == 4.0 and built.metrics["batch/rollouts_zero_advantage"] == 2.0


def test_filter_zero_variance_leaves_flat_groups_out_of_batch_and_denominators():
    flat = group("flat", {"a": 1.0, "b": 1.0}, calls=two_samples)
    mixed = group("mixed", {"c": 1.0, "d": 0.0}, calls=two_samples)
    built = prepare_step([flat, mixed], AdvantageConfig(filter_zero_variance=True), SampleLimits())
    assert {s.rollout_id for s in built.batch.samples} == {"c", "d"} and built.metrics["batch/rollouts"] == 2.0


def test_all_flat_groups_mean_no_signal():
    flat = group("flat", {"a": 1.0, "b": 1.0}, calls=two_samples)
    zero = group("zero", {"e": 0.0, "f": 0.0}, calls=two_samples)
    none = prepare_step([flat, zero], AdvantageConfig(), SampleLimits())
    assert none.no_signal and none.batch is None
    assert none.metrics["rollout/reward_mean"] == 0.5 and none.metrics["advantages/groups_with_signal"] == 0.0


def test_agent_failures_count_with_reward_zero_and_infra_failures_are_excluded():
    g = group("g", {"a": 1.0, "b": None, "c": None}, failures={"b": "agent", "c": "infra"}, calls=two_samples)
    built = prepare_step([g], AdvantageConfig(), SampleLimits())
    assert {s.rollout_id for s in built.batch.samples} == {"a", "b"}
    assert built.metrics["advantages/rollouts_excluded_infra"] == 1.0
    assert built.metrics["rollout/failed_agent"] == 1.0 and built.metrics["rollout/failed_infra"] == 1.0


def test_reward_metrics_table():
    rollouts = [rollout("a", "g", 1.0), rollout("b", "g", 0.5), rollout("c", "g", None, failure_kind="infra")]
    m = reward_metrics(rollouts, pass_threshold=1.0, prefix="val")
    assert m == {"val/reward_mean": 0.75, "val/reward_std": 0.25, "val/pass_rate": 0.5, "val/rollouts": 3.0,
                 "val/scored": 2.0, "val/graded": 2.0, "val/failed_agent": 0.0, "val/failed_infra": 1.0}
    assert reward_metrics([], 1.0, "val")["val/reward_mean"] == 0.0


def test_an_agent_failure_without_a_reward_lowers_the_mean_instead_of_leaving_it():
    """A harness that timed out on a hard task has no reward; leaving it out reported 1/2 where the policy solved 1 of
    4 (a calculator validation read 0.47 with 45 of 64 timed out). It counts at the failure reward, infra stays out."""
    rollouts = [rollout("a", "g", 1.0), rollout("b", "g", 0.0), rollout("c", "g", None, failure_kind="agent"),
                rollout("d", "g", None, failure_kind="agent"), rollout("e", "g", None, failure_kind="infra")]
    m = reward_metrics(rollouts, pass_threshold=1.0, prefix="val")
    assert m["val/reward_mean"] == 0.25 and m["val/pass_rate"] == 0.25
    assert m["val/scored"] == 4.0 and m["val/graded"] == 2.0 and m["val/failed_agent"] == 2.0
    assert reward_metrics(rollouts, 1.0, "val", failure_reward=-1.0)["val/reward_mean"] == -0.25
    stalled = reward_metrics(rollouts[:2], 1.0, "val", unfinished=2)  # two tasks never finished
    assert stalled["val/reward_mean"] == 0.25 and stalled["val/scored"] == 4.0 and stalled["val/rollouts"] == 2.0


def test_the_step_reports_agent_failures_at_the_reward_it_trains_them_on():
    g = group("g", {"a": 1.0, "b": None}, failures={"b": "agent"}, calls=two_samples)
    assert prepare_step([g], AdvantageConfig(), SampleLimits()).metrics["rollout/reward_mean"] == 0.5
    minus = prepare_step([g], AdvantageConfig(agent_failure_reward=-1.0), SampleLimits())
    assert minus.metrics["rollout/reward_mean"] == 0.0
    excluded = prepare_step([g], AdvantageConfig(agent_failure_reward=None), SampleLimits())
    assert excluded.metrics["rollout/reward_mean"] == 0.5  # left out of the advantages, never out of the metric


def test_a_step_reports_how_its_rollouts_split_within_their_groups():
    """One rollout of the group splits in two, the other stays one sample: the spread the ablation needs is logged."""
    def uneven(rid: str) -> tuple[CallRecord, ...]:
        return two_samples(rid) if rid == "a" else (call(rid, 0, 0, [7, 8], prompt=PROMPT),)

    built = prepare_step([group("g", {"a": 1.0, "b": 0.0}, calls=uneven)], AdvantageConfig(), SampleLimits())
    assert built.metrics["samples/per_rollout_var_within_group"] == 0.25  # counts 2 and 1
    assert built.metrics["samples/groups_with_varied_splits_share"] == 1.0
    even = prepare_step([group("g", {"a": 1.0, "b": 0.0}, calls=two_samples)], AdvantageConfig(), SampleLimits())
    assert even.metrics["samples/groups_with_varied_splits_share"] == 0.0
