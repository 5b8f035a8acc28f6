"""Our policy loss inside verl (skipped without it; fails if HARNESSRL_REQUIRE_VERL=1): registry, DataProto, loss."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

from tests.trainer.verl_support import require_verl

require_verl("verl")
require_verl("tensordict")

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from trainer.backends.verl import build_data_proto, build_training_input  # noqa: E402
from trainer.backends.verl_batch import to_verl_rows  # noqa: E402
from trainer.backends.verl_loss import (  # noqa: E402
    POLICY_LOSS_NAME,
    VerlLossSettings,
    _settings,
    actor_loss,
    weighted_ppo_policy_loss,
)
from trainer.losses import LossBatch, LossConfig, LossDenominators, policy_loss  # noqa: E402
from trainer.samples import RecordedCall, build_samples  # noqa: E402
from trainer.scheduling import ScheduleConfig, schedule  # noqa: E402

PAD = 0


def samples_and_advantages():
    """Rollout a: a two-turn sample and a separate one; rollout b: one sample. Advantages of both signs."""

    def call(rollout, seq, prompt, response, version):
        return RecordedCall(
            rollout,
            "g",
            seq,
            prompt,
            response,
            tuple(-0.1 * (i + 1) for i in range(len(response))),
            version,
            True,
            "stop",
        )

    calls = [
        call("a", 0, (1, 2, 3), (4, 5), 1),
        call("a", 1, (1, 2, 3, 4, 5, 6, 7), (8, 9, 10), 2),
        call("a", 2, (11, 12), (13, 14, 15, 16), 2),
        call("b", 0, (21,), (22, 23), 1),
    ]
    samples = build_samples(calls).samples
    return samples, np.array([0.7, 0.7, -1.2][: len(samples)])


def rows_for(samples, advantages, dp_size, mode="rollout-token-mean"):
    (update,) = schedule(samples, ScheduleConfig(num_workers=dp_size)).updates
    return to_verl_rows(samples, advantages, update, dp_size=dp_size, agg_mode=mode, pad_token_id=PAD)


def current_logprobs(samples, seed):
    generator = torch.Generator().manual_seed(seed)
    return [-torch.rand(s.num_tokens, generator=generator, dtype=torch.float32) * 0.5 for s in samples]


def model_output_for(rows, data, logprobs_S):
    """What verl's engine returns: per-sequence logprobs, value t predicting token t+1 (fillers: zeros)."""
    pieces = []
    for r in range(rows.num_rows):
        length = int(rows.attention_mask[r].sum())
        index = int(rows.sample_index[r])
        piece = torch.zeros(length)
        if index >= 0:
            piece[:-1] = logprobs_S[index][1:]
        pieces.append(piece)
    values = torch.cat(pieces).requires_grad_(True)
    nested = torch.nested.nested_tensor_from_jagged(values, offsets=data["input_ids"].offsets())
    return {"log_probs": nested}, values


def reference_loss(samples, advantages, logprobs_S, config):
    denominators = LossDenominators.from_sequences(
        [s.rollout_id for s in samples], [s.num_trainable_tokens for s in samples]
    )
    full = LossBatch.pack(samples, advantages, denominators, config.agg_mode)
    mask = torch.from_numpy(np.concatenate([s.loss_mask_T for s in samples]))
    batch = LossBatch(
        full.old_logprobs_T[mask], full.advantages_T[mask], full.weights_T[mask], full.token_share_T[mask]
    )
    return policy_loss(torch.cat(logprobs_S)[mask], batch, config)


def test_policy_loss_is_registered_in_verls_registry():
    assert POLICY_LOSS_REGISTRY[POLICY_LOSS_NAME] is weighted_ppo_policy_loss
    assert get_policy_loss_fn(POLICY_LOSS_NAME) is weighted_ppo_policy_loss


def test_policy_loss_without_token_weights_names_the_fix():
    ones = torch.ones(1, 2)
    with pytest.raises(ValueError, match="token_weights"):
        weighted_ppo_policy_loss(ones, ones, ones, ones, config=VerlLossSettings(LossConfig()), rollout_is_weights=ones)


def test_data_proto_holds_the_rows_and_chunks_by_rank():
    samples, advantages = samples_and_advantages()
    rows = rows_for(samples, advantages, dp_size=2)
    proto = build_data_proto(rows)
    assert len(proto) == rows.num_rows
    assert proto.batch["input_ids"].shape == rows.input_ids.shape
    assert proto.batch["response_mask"].shape == rows.responses.shape
    for rank, chunk in enumerate(proto.chunk(2)):
        half = rows.num_rows // 2
        np.testing.assert_array_equal(chunk.batch["sample_index"].numpy(), rows.sample_index[rank * half :][:half])
        assert list(chunk.non_tensor_batch["rollout_id"]) == list(rows.rollout_id[rank * half :][:half])
        assert list(chunk.non_tensor_batch["spans"]) == list(rows.spans[rank * half :][:half])


def test_training_input_is_verls_no_padding_layout():
    samples, advantages = samples_and_advantages()
    rows = rows_for(samples, advantages, dp_size=1)
    data = build_training_input(rows, calculate_entropy=False)
    lengths = data["input_ids"].offsets().diff().tolist()
    assert lengths == [int(n) for n in rows.attention_mask.sum(axis=1)]
    for r, length in enumerate(lengths):
        np.testing.assert_array_equal(data["input_ids"][r].numpy(), rows.input_ids[r][rows.attention_mask[r] == 1])
        np.testing.assert_array_equal(data["position_ids"][r].numpy(), np.arange(length))
    assert tu.get(data, "temperature") == 1.0
    assert tu.get(data, "mini_batch_size") == rows.num_rows


@pytest.mark.parametrize("mode", ["rollout-token-mean", "token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("micro_batches", [1, 3])
def test_actor_loss_through_verls_layout_equals_our_loss(mode, micro_batches):
    samples, advantages = samples_and_advantages()
    config = LossConfig(agg_mode=mode, clip_low=0.2, clip_high=0.28)
    logprobs_S = current_logprobs(samples, seed=3)
    rows = rows_for(samples, advantages, dp_size=1, mode=mode)
    data = build_training_input(rows, calculate_entropy=False)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=rows.trainable_tokens)
    output, values = model_output_for(rows, data, logprobs_S)
    total = torch.zeros(())
    metrics_sum: dict[str, float] = {}
    bounds = np.array_split(np.arange(rows.num_rows), micro_batches)
    for part in bounds:
        chunk = tu.index_select_tensor_dict(data, torch.as_tensor(part))
        chunk_out, _ = model_output_for(rows_subset(rows, part), chunk, logprobs_S)
        loss, metrics = actor_loss(chunk_out, chunk, config=config)
        total = total + loss
        for key, metric in metrics.items():
            metrics_sum[key] = metrics_sum.get(key, 0.0) + metric.aggregate()
    expected = reference_loss(samples, advantages, logprobs_S, config)
    assert float(total.detach()) == pytest.approx(float(expected.loss), rel=1e-5, abs=1e-7)
    for key in ("loss/pg", "loss/clip_fraction", "loss/ppo_kl"):
        assert metrics_sum[key] == pytest.approx(expected.metrics[key], rel=1e-5, abs=1e-7)
    loss, _ = actor_loss(output, data, config=config)
    loss.backward()
    assert values.grad is not None and float(values.grad.abs().sum()) > 0


def rows_subset(rows, part):
    """A view of `rows` with only the given row indices (for building a matching model output)."""
    from dataclasses import replace

    keep = np.asarray(part)
    fields = {name: getattr(rows, name)[keep] for name in (*rows.tensor_fields(), *rows.provenance_fields())}
    return replace(rows, **fields)


def test_data_parallel_ranks_mean_to_the_full_loss():
    """Each rank's loss is scaled by dp_size; verl averages over ranks: the mean equals the one-rank loss."""
    samples, advantages = samples_and_advantages()
    config = LossConfig()
    logprobs_S = current_logprobs(samples, seed=5)
    rows = rows_for(samples, advantages, dp_size=2)
    data = build_training_input(rows, calculate_entropy=False)
    half = rows.num_rows // 2
    rank_losses = []
    for rank in range(2):
        part = np.arange(rank * half, (rank + 1) * half)
        chunk = tu.index_select_tensor_dict(data, torch.as_tensor(part))
        tu.assign_non_tensor(chunk, dp_size=2, batch_num_tokens=rows.trainable_tokens)
        output, _ = model_output_for(rows_subset(rows, part), chunk, logprobs_S)
        rank_losses.append(float(actor_loss(output, chunk, config=config)[0]))
    expected = reference_loss(samples, advantages, logprobs_S, config)
    assert sum(rank_losses) / 2 == pytest.approx(float(expected.loss), rel=1e-5, abs=1e-7)


def test_loss_fn_survives_pickling_for_ray():
    import pickle

    loss_fn = pickle.loads(pickle.dumps(partial(actor_loss, config=LossConfig(clip_high=0.3))))
    assert loss_fn.keywords["config"].clip_high == 0.3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_mean_weights_match_verls_vanilla_policy_loss_on_random_inputs(seed):
    """Same inputs through verl's own `vanilla` loss (token-mean) and ours with 1/N weights: same loss and gradient."""
    from omegaconf import OmegaConf

    generator = torch.Generator().manual_seed(seed)
    shape = (4, 7)
    old = -torch.rand(shape, generator=generator) * 2
    new = (old + torch.randn(shape, generator=generator) * 0.4).requires_grad_(True)
    advantages = torch.randn(shape[0], 1, generator=generator).expand(shape)
    mask = (torch.rand(shape, generator=generator) > 0.3).float()
    tokens = int(mask.sum())
    config = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "global_batch_info": {"dp_size": 1, "batch_num_tokens": tokens},
        }
    )
    expected, verl_metrics = get_policy_loss_fn("vanilla")(old, new, advantages, mask, "token-mean", config, None)
    (expected_grad,) = torch.autograd.grad(expected, new)
    settings = replace(_settings(config), token_weights=mask / tokens)
    ours, metrics = weighted_ppo_policy_loss(old, new, advantages, mask, "token-sum", settings, None)
    (grad,) = torch.autograd.grad(ours, new)
    assert float(ours) == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-7)
    assert metrics["loss/clip_fraction"] == pytest.approx(verl_metrics["actor/pg_clipfrac"], abs=1e-6)
    assert metrics["loss/ppo_kl"] == pytest.approx(verl_metrics["actor/ppo_kl"], abs=1e-6)
