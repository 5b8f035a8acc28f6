"""Decoupled PPO on the verl backend (skipped without verl): the recomputation pass, the decoupled batch through
verl's loss against the torch backend's decoupled loss, and `VerlBackend.train_step` on a fake worker group."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.verl_support import require_verl

require_verl("verl")
require_verl("tensordict")

from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.utils.padding import no_padding_2_padding  # noqa: E402

from tests.trainer.test_verl_loss import model_output_for, rows_for, samples_and_advantages  # noqa: E402
from trainer.backends.base import TrainBatch  # noqa: E402
from trainer.backends.torch import TorchBackend, TorchBackendConfig  # noqa: E402
from trainer.backends.verl import (  # noqa: E402
    VerlBackend,
    VerlBackendConfig,
    build_recompute_input,
    build_training_input,
    recomputed_logprobs,
)
from trainer.backends.verl_batch import FILLER_SAMPLE_INDEX, split_point, with_recomputed_logprobs  # noqa: E402
from trainer.backends.verl_loss import ROLLOUT_LOGPROBS_KEY, TRAINER_VERSION_KEY, actor_loss  # noqa: E402
from trainer.losses import LossConfig, policy_loss  # noqa: E402
from trainer.off_policy import OffPolicyConfig  # noqa: E402
from trainer.scheduling import ScheduleConfig, schedule  # noqa: E402


def shifted_logprobs(samples, base_S, seed: int, spread: float):
    """Per-sample logprobs: `base_S` (or the recorded ones) plus noise, kept negative."""
    generator = torch.Generator().manual_seed(seed)
    bases = base_S or [torch.tensor(np.asarray(s.logprobs_T), dtype=torch.float32) for s in samples]
    return [(b + torch.randn(b.shape, generator=generator) * spread).clamp(max=-1e-3) for b in bases]


def recompute_output(rows, data, proximal_S):
    """What `infer_batch(...).get()` returns: `log_probs` in the no-padding layout (one nested row per sequence)."""
    output, _ = model_output_for(rows, data, proximal_S)
    return tu.get_tensordict(tensor_dict={"log_probs": output["log_probs"].detach()}, non_tensor_dict={"metrics": {}})


def decoupled_rows(samples, advantages, proximal_S, dp_size=1):
    rows = rows_for(samples, advantages, dp_size=dp_size)
    data = build_recompute_input(rows)
    return rows, with_recomputed_logprobs(rows, recomputed_logprobs(recompute_output(rows, data, proximal_S), data))


def test_recompute_input_is_forward_only_at_the_rows_temperature_and_maps_back_to_the_response_region():
    samples, advantages = samples_and_advantages()
    proximal_S = shifted_logprobs(samples, None, seed=1, spread=0.2)
    rows = rows_for(samples, advantages, dp_size=2)
    rows = dataclasses.replace(rows, temperature=0.7)
    data = build_recompute_input(rows)
    assert tu.get(data, "compute_loss") is False and tu.get(data, "temperature") == 0.7
    assert tu.get(data, "calculate_entropy") is False
    recomputed = recomputed_logprobs(recompute_output(rows, data, proximal_S), data)
    assert recomputed.shape == rows.response_mask.shape and recomputed.dtype == np.float32
    for r in range(rows.num_rows):
        index = int(rows.sample_index[r])
        if index == FILLER_SAMPLE_INDEX:
            continue
        cut, sample = split_point(samples[index]), samples[index]
        n = sample.num_tokens - cut
        np.testing.assert_allclose(recomputed[r, :n], proximal_S[index][cut:].numpy(), rtol=0, atol=0)


def test_a_recompute_output_for_other_sequences_is_refused():
    samples, advantages = samples_and_advantages()
    proximal_S = shifted_logprobs(samples, None, seed=1, spread=0.2)
    rows = rows_for(samples, advantages, dp_size=1)
    data = build_recompute_input(rows)
    short = rows_for(samples[:2], advantages[:2], dp_size=1)
    with pytest.raises(ValueError, match="lengths .* but the rows sent have lengths"):
        recomputed_logprobs(recompute_output(short, build_recompute_input(short), proximal_S), data)


def torch_backend_decoupled_loss(samples, advantages, proximal_S, current_S, config: LossConfig):
    """The torch backend's decoupled loss: its own update inputs, proximal logprobs as old, recorded as behaviour."""
    backend = TorchBackend(TorchBackendConfig(model_path=Path("unused"), loss=config))
    (update,) = schedule(samples, backend.config.schedule).updates
    _, inputs = backend._update_inputs(TrainBatch.of(samples, advantages), update)
    total, metrics = torch.zeros((), dtype=torch.float64), {}
    for micro_batch, mb_plan in zip(inputs, update.workers[0].micro_batches, strict=True):
        members = [seq.sample_index for seq in mb_plan.sequences]

        def trainable(values_S, members=members):
            return torch.cat([values_S[i][torch.tensor(np.asarray(samples[i].loss_mask_T))] for i in members])

        batch = dataclasses.replace(
            micro_batch.loss, old_logprobs_T=trainable(proximal_S), behaviour_logprobs_T=micro_batch.loss.old_logprobs_T
        )
        output = policy_loss(trainable(current_S), batch, config)
        total = total + output.loss.double()
        for key, value in output.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + value
    return total, metrics


@pytest.mark.parametrize(
    "off_policy",
    [
        OffPolicyConfig(recompute_behaviour=True, tis_cap=1.2),
        OffPolicyConfig(recompute_behaviour=True, tis_cap=None, is_level="sequence"),
        OffPolicyConfig(recompute_behaviour=True, tis_cap=2.0, seq_mask_geo_mean=(0.9, 1.1)),
    ],
    ids=["token-tis", "sequence", "geo-mean-mask"],
)
def test_decoupled_training_input_carries_rollout_logprobs_and_verls_loss_equals_the_torch_backends(off_policy):
    samples, advantages = samples_and_advantages()
    config = LossConfig(clip_low=0.2, clip_high=0.28, off_policy=off_policy)
    proximal_S = shifted_logprobs(samples, None, seed=2, spread=0.25)
    current_S = shifted_logprobs(samples, proximal_S, seed=3, spread=0.2)
    rows, decoupled = decoupled_rows(samples, advantages, proximal_S)
    data = build_training_input(decoupled, calculate_entropy=False)
    assert ROLLOUT_LOGPROBS_KEY in data.keys()  # noqa: SIM118 (TensorDict has no `in`)
    np.testing.assert_array_equal(data[ROLLOUT_LOGPROBS_KEY].numpy(), rows.old_log_probs)
    np.testing.assert_array_equal(data["old_log_probs"].numpy(), decoupled.old_log_probs)
    assert ROLLOUT_LOGPROBS_KEY not in build_training_input(rows, calculate_entropy=False).keys()  # noqa: SIM118
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=decoupled.trainable_tokens)
    output, values = model_output_for(decoupled, data, current_S)
    loss, reported = actor_loss(output, data, config=config)
    expected, expected_metrics = torch_backend_decoupled_loss(samples, advantages, proximal_S, current_S, config)
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    for key in ("loss/pg", "loss/clip_fraction", "off_policy/is_weight_mean", "off_policy/is_truncated_fraction",
                "off_policy/masked_token_fraction"):
        assert reported[key].aggregate() == pytest.approx(expected_metrics[key], rel=1e-5, abs=1e-7), key
    assert expected_metrics["off_policy/is_weight_mean"] != pytest.approx(1.0, abs=1e-3)  # the weights do act
    if off_policy.tis_cap == 1.2:
        assert 0 < expected_metrics["off_policy/is_truncated_fraction"] < 1
    if off_policy.seq_mask_geo_mean is not None:
        assert 0 < expected_metrics["off_policy/masked_token_fraction"] < 1
    without = build_training_input(rows, calculate_entropy=False)  # recorded logprobs alone: recompute is required
    tu.assign_non_tensor(without, dp_size=1, batch_num_tokens=rows.trainable_tokens)
    with pytest.raises(ValueError, match="no behaviour_logprobs_T"):
        actor_loss(model_output_for(rows, without, current_S)[0], without, config=config)
    loss.backward()
    assert values.grad is not None and float(values.grad.abs().sum()) > 0


def fake_logprob(token_ids: torch.Tensor, weights_version: int) -> torch.Tensor:
    """The fake policy's logprob of each token: depends on the token and on the workers' current weights."""
    return -0.3 - 0.01 * token_ids.double() - 0.1 * weights_version


class _Done:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class FakeWorkers:
    """A verl worker group stand-in: `infer_batch` answers verl's no-padding `log_probs` from the current fake
    weights, `train_mini_batch` records what it was sent and moves the weights (one version per update)."""

    def __init__(self) -> None:
        self.weights_version = 0
        self.calls: list[tuple[str, int]] = []
        self.trained: list[dict[str, object]] = []

    def infer_batch(self, data):
        self.calls.append(("infer", self.weights_version))
        assert tu.get(data, "compute_loss") is False
        input_ids = data["input_ids"]  # nested: one sequence per row, no padding
        pieces = []
        for sequence in input_ids.unbind():
            piece = torch.zeros(sequence.shape[0], dtype=torch.float32)
            piece[:-1] = fake_logprob(sequence[1:], self.weights_version).float()  # value t: token t + 1
            pieces.append(piece)
        log_probs = torch.nested.nested_tensor_from_jagged(torch.cat(pieces), offsets=input_ids.offsets())
        return _Done(tu.get_tensordict(tensor_dict={"log_probs": log_probs}, non_tensor_dict={"metrics": {}}))

    def train_mini_batch(self, data):
        self.calls.append(("train", self.weights_version))
        keys = set(data.keys())
        recorded = data[ROLLOUT_LOGPROBS_KEY].numpy().copy() if ROLLOUT_LOGPROBS_KEY in keys else None
        self.trained.append(
            {
                "old_log_probs": data["old_log_probs"].numpy().copy(),
                "rollout_log_probs": recorded,
                "responses": data["responses"].numpy().copy(),
                "response_mask": data["response_mask"].numpy().copy(),
                "policy_versions": data["policy_versions"].numpy().copy(),
                "trainer_version": tu.get(data, TRAINER_VERSION_KEY),
                "temperature": tu.get(data, "temperature"),
            }
        )
        self.weights_version += 1
        metrics = {"loss/total": 0.5, "loss/pg": 0.25}
        return _Done(tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics}))


def fake_backend(recompute: bool, dp_size: int, num_updates: int = 2, initial_version: int = 2):
    config = VerlBackendConfig(
        model_path=Path("unused"),
        n_gpus_per_node=dp_size,
        loss=LossConfig(off_policy=OffPolicyConfig(recompute_behaviour=recompute)),
        schedule=ScheduleConfig(num_workers=dp_size, num_updates=num_updates),
        initial_version=initial_version,
    )
    backend = VerlBackend(config)
    backend.workers = FakeWorkers()
    return backend


@pytest.mark.parametrize("dp_size", [1, 2])
def test_every_update_trains_on_logprobs_recomputed_at_the_steps_starting_weights(dp_size):
    samples, advantages = samples_and_advantages()  # rollouts a (versions 1, 2) and b (version 1)
    backend = fake_backend(recompute=True, dp_size=dp_size)
    metrics = backend.train_step(TrainBatch.of(samples, advantages))
    workers = backend.workers
    updates = len(workers.trained)
    assert updates == 2  # the two rollouts in two optimizer updates
    assert workers.calls == [("infer", 0)] * updates + [("train", 0), ("train", 1)]  # every recompute first
    recorded = sorted(float(v) for s in samples for v in np.asarray(s.logprobs_T)[np.asarray(s.loss_mask_T)])
    trained_tokens = 0
    for sent in workers.trained:
        mask = sent["response_mask"] == 1
        expected = fake_logprob(torch.from_numpy(sent["responses"]), 0).float().numpy()  # weights of version 0
        np.testing.assert_allclose(sent["old_log_probs"][mask], expected[mask], rtol=0, atol=1e-6)
        assert (sent["old_log_probs"][~mask] == 0).all() and sent["rollout_log_probs"] is not None
        recorded_here = sent["rollout_log_probs"][mask]
        assert all(float(v) in recorded for v in recorded_here)  # the engine's recorded logprobs, untouched
        assert not np.allclose(recorded_here, sent["old_log_probs"][mask])
        assert sent["trainer_version"] is None  # measured on the driver from the recomputation instead
        assert sent["temperature"] == 1.0
        trained_tokens += int(mask.sum())
    assert trained_tokens == sum(s.num_trainable_tokens for s in samples)
    assert backend.policy_version == 3 and backend.optimizer_updates == 2
    assert metrics["loss/total"] == 0.5

    # off_policy/ metrics from the recomputation against the recorded logprobs, as the torch backend reports them
    trainer, behaviour, lags = [], [], []
    for s in samples:
        mask = np.asarray(s.loss_mask_T, dtype=bool)
        trainer += fake_logprob(torch.tensor(np.asarray(s.token_ids_T)), 0).numpy()[mask].tolist()
        behaviour += np.asarray(s.logprobs_T)[mask].tolist()
        lags += (2 - np.asarray(s.policy_versions_T)[mask]).tolist()
    trainer, behaviour, lags = np.array(trainer), np.array(behaviour), np.array(lags)
    assert metrics["off_policy/measured_token_fraction"] == pytest.approx(1.0)
    for lag in (0, 1):
        at = lags == lag
        diff = trainer[at] - behaviour[at]
        ratio = np.exp(diff)
        assert metrics[f"off_policy/lag{lag}_tokens"] == int(at.sum())
        assert metrics[f"off_policy/lag{lag}_abs_diff_mean"] == pytest.approx(np.abs(diff).mean(), abs=1e-6)
        assert metrics[f"off_policy/lag{lag}_abs_diff_max"] == pytest.approx(np.abs(diff).max(), abs=1e-6)
        assert metrics[f"off_policy/lag{lag}_k3"] == pytest.approx((ratio - diff - 1).mean(), rel=1e-5)
        assert metrics[f"off_policy/lag{lag}_ratio_min"] == pytest.approx(ratio.min(), rel=1e-5)
    assert "off_policy/lag2_tokens" not in metrics


def test_the_next_step_recomputes_at_its_own_starting_weights():
    samples, advantages = samples_and_advantages()
    backend = fake_backend(recompute=True, dp_size=1)
    backend.train_step(TrainBatch.of(samples, advantages))
    backend.train_step(TrainBatch.of(samples, advantages))
    workers = backend.workers
    assert workers.calls[4:] == [("infer", 2), ("infer", 2), ("train", 2), ("train", 3)]
    for sent in workers.trained[2:]:
        mask = sent["response_mask"] == 1
        expected = fake_logprob(torch.from_numpy(sent["responses"]), 2).float().numpy()
        np.testing.assert_allclose(sent["old_log_probs"][mask], expected[mask], rtol=0, atol=1e-6)


def test_bypass_mode_runs_no_forward_pass_and_measures_the_first_update():
    samples, advantages = samples_and_advantages()
    backend = fake_backend(recompute=False, dp_size=1)
    backend.train_step(TrainBatch.of(samples, advantages))
    workers = backend.workers
    assert workers.calls == [("train", 0), ("train", 1)]
    assert all(sent["rollout_log_probs"] is None for sent in workers.trained)
    assert [sent["trainer_version"] for sent in workers.trained] == [2, None]


def test_the_config_accepts_recompute_behaviour_and_still_refuses_kl():
    on = OffPolicyConfig(recompute_behaviour=True)
    assert VerlBackendConfig(Path("/m"), loss=LossConfig(off_policy=on)).loss.off_policy.recompute_behaviour
    with pytest.raises(ValueError, match="reference worker"):
        VerlBackendConfig(Path("/m"), loss=LossConfig(kl_coef=0.1, off_policy=on))


def test_no_padding_output_round_trips_through_verls_own_conversion():
    """The fake's output is verl's layout: verl's own `no_padding_2_padding` gives the recomputation's values."""
    samples, advantages = samples_and_advantages()
    rows = rows_for(samples, advantages, dp_size=1)
    data = build_recompute_input(rows)
    output = FakeWorkers().infer_batch(data).get()
    padded = no_padding_2_padding(tu.get(output, "log_probs"), data).numpy()
    mask = rows.response_mask == 1
    expected = fake_logprob(torch.from_numpy(rows.responses), 0).float().numpy()
    np.testing.assert_allclose(padded[mask], expected[mask], rtol=0, atol=1e-6)
