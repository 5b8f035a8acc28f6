"""The torch backend on the tiny model: the real update, micro-batch and layout invariance, clipping, KL, resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.engine.support import teacher_forced_logprobs
from trainer.backends.base import TrainBatch
from trainer.backends.torch import OptimizerConfig, TorchBackend, TorchBackendConfig, warmup_lr
from trainer.losses import LossConfig
from trainer.samples import RecordedCall, build_samples
from trainer.scheduling import ScheduleConfig

PROMPT = (1, 504, 2116, 4193, 17423)
POSITIVE = (28, 1123, 905, 42, 7711, 300)
NEGATIVE = (9050, 17, 2210, 48000, 61, 4)


def make_backend(
    model_dir: Path,
    *,
    lr: float = 1e-3,
    max_grad_norm: float | None = None,
    schedule: ScheduleConfig = ScheduleConfig(),
    loss: LossConfig = LossConfig(),
    resume_from: Path | None = None,
    dtype: str = "float32",
    weight_decay: float = 0.01,
) -> TorchBackend:
    backend = TorchBackend(
        TorchBackendConfig(
            model_dir,
            resume_from=resume_from,
            optimizer=OptimizerConfig(lr=lr, max_grad_norm=max_grad_norm, weight_decay=weight_decay),
            schedule=schedule,
            loss=loss,
            dtype=dtype,
        )
    )
    backend.load()
    return backend


def on_policy_call(model, rollout_id: str, seq: int, prompt, response) -> RecordedCall:
    """A call whose recorded logprobs are the model's own (the ratio starts at 1)."""
    logprobs = teacher_forced_logprobs(model, list(prompt), list(response))
    return RecordedCall(rollout_id, "g0", seq, tuple(prompt), tuple(response), tuple(logprobs), 0, True, "stop")


def response_logprob(model, prompt, response) -> float:
    return sum(teacher_forced_logprobs(model, list(prompt), list(response)))


@pytest.fixture(scope="module")
def base_model(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="module")
def mixed_batch(base_model) -> TrainBatch:
    """Four rollouts of one or two samples (multi-turn and compacted), lengths 9-31, random advantages."""
    rng = np.random.default_rng(0)
    calls = []
    for rollout in range(4):
        prompt = tuple(int(t) for t in rng.integers(1, 49000, 4 + 3 * rollout))
        first = tuple(int(t) for t in rng.integers(1, 49000, 5 + rollout))
        calls.append(on_policy_call(base_model, f"r{rollout}", 0, prompt, first))
        if rollout % 2 == 0:  # a second turn that extends the first: one longer sample
            follow = prompt + first + tuple(int(t) for t in rng.integers(1, 49000, 3))
        else:  # compaction: a new context, a second sample of the same rollout
            follow = tuple(int(t) for t in rng.integers(1, 49000, 6))
        calls.append(on_policy_call(base_model, f"r{rollout}", 1, follow, tuple(rng.integers(1, 49000, 4).tolist())))
    samples = build_samples(calls).samples
    return TrainBatch.of(samples, rng.normal(size=len(samples)))


def test_one_step_raises_the_positive_response_and_lowers_the_negative(tiny_model_dir, base_model):
    calls = [
        on_policy_call(base_model, "pos", 0, PROMPT, POSITIVE),
        on_policy_call(base_model, "neg", 0, PROMPT, NEGATIVE),
    ]
    backend = make_backend(tiny_model_dir, max_grad_norm=1.0)
    metrics = backend.train_step(TrainBatch.of(build_samples(calls).samples, [1.0, -1.0]))
    assert response_logprob(backend.model, PROMPT, POSITIVE) > response_logprob(base_model, PROMPT, POSITIVE) + 0.1
    assert response_logprob(backend.model, PROMPT, NEGATIVE) < response_logprob(base_model, PROMPT, NEGATIVE) - 0.1
    assert backend.policy_version == 1 and metrics["train/policy_version"] == 1.0
    # On-policy first step: ratio 1, nothing clipped, no divergence; the loss is -(mean advantage) = 0.
    assert metrics["loss/clip_fraction"] == 0.0 and abs(metrics["loss/approx_kl_k3"]) < 1e-6
    assert abs(metrics["loss/total"]) < 1e-6
    assert 10.0 < metrics["loss/entropy"] < np.log(49152) + 1e-3  # near-uniform random model
    assert metrics["train/grad_norm"] > 0 and metrics["train/lr"] == 1e-3
    assert metrics["train/trainable_tokens"] == 12 and metrics["train/tokens"] == 22
    assert metrics["train/tokens_per_s"] > 0 and metrics["schedule/micro_batches"] == 1


def grads(backend: TorchBackend) -> list[torch.Tensor]:
    return [p.grad.clone() for p in backend.model.parameters()]


@pytest.fixture(scope="module")
def whole_update(tiny_model_dir, mixed_batch) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Gradients and metrics of one packed micro-batch holding the whole mixed batch."""
    whole = make_backend(tiny_model_dir, schedule=ScheduleConfig(max_tokens_per_micro_batch=4096))
    metrics = dict(whole.train_step(mixed_batch))
    assert metrics["schedule/micro_batches"] == 1
    return grads(whole), metrics


@pytest.mark.parametrize(
    "schedule",
    [
        ScheduleConfig(max_tokens_per_micro_batch=40),
        ScheduleConfig(max_tokens_per_micro_batch=40, layout="padded"),
        ScheduleConfig(max_tokens_per_micro_batch=4096, layout="padded"),
        ScheduleConfig(max_tokens_per_micro_batch=40, layout="shared_prefix"),
        ScheduleConfig(max_tokens_per_micro_batch=4096, layout="shared_prefix"),
    ],
    ids=["packed-split", "padded-split", "padded-whole", "shared-prefix-split", "shared-prefix-whole"],
)
def test_micro_batch_split_and_layout_do_not_change_the_update(tiny_model_dir, mixed_batch, whole_update, schedule):
    whole_grads, whole_metrics = whole_update
    split = make_backend(tiny_model_dir, schedule=schedule)
    split_metrics = split.train_step(mixed_batch)
    if schedule.max_tokens_per_micro_batch == 40:
        assert split_metrics["schedule/micro_batches"] >= 3
    scale = max(float(g.abs().max()) for g in whole_grads)
    worst = max(float((a - b).abs().max()) for a, b in zip(whole_grads, grads(split), strict=True))
    assert worst <= 2e-6 * scale, f"gradients differ by {worst} (largest gradient {scale})"
    for key in ("loss/total", "loss/entropy", "loss/ppo_kl", "train/grad_norm"):
        assert split_metrics[key] == pytest.approx(whole_metrics[key], rel=1e-5, abs=1e-7), key


@pytest.fixture(scope="module")
def group_batch(base_model) -> TrainBatch:
    """Two groups answering their own prompt (one rollout multi-turn, one compacted), two rollouts with their own."""
    rng = np.random.default_rng(1)
    calls = []
    for group in range(2):
        prompt = tuple(int(t) for t in rng.integers(1, 49000, 12 + 5 * group))
        for member in range(4):
            rollout = f"g{group}r{member}"
            answer = tuple(int(t) for t in rng.integers(1, 49000, 3 + member))
            calls.append(on_policy_call(base_model, rollout, 0, prompt, answer))
            if member == 1:  # a second turn extending the first
                follow = prompt + answer + tuple(int(t) for t in rng.integers(1, 49000, 2))
                calls.append(on_policy_call(base_model, rollout, 1, follow, (5, 6, 7)))
            if member == 2:  # compaction: a new context
                calls.append(on_policy_call(base_model, rollout, 1, (11, 12, 13, 14), (8, 9)))
    calls.append(on_policy_call(base_model, "alone", 0, (3, 4), (21, 22, 23)))
    calls.append(on_policy_call(base_model, "one-token-prompt", 0, (7,), (24, 25)))  # nothing before its prefix end
    samples = build_samples(calls).samples
    return TrainBatch.of(samples, rng.normal(size=len(samples)))


@pytest.mark.parametrize("budget", [24, 60, 4096])
def test_a_shared_prefix_gives_the_padded_update_and_computes_fewer_tokens(tiny_model_dir, group_batch, budget):
    padded = make_backend(tiny_model_dir, schedule=ScheduleConfig(max_tokens_per_micro_batch=4096, layout="padded"))
    padded_metrics = padded.train_step(group_batch)
    shared = make_backend(tiny_model_dir,
                          schedule=ScheduleConfig(max_tokens_per_micro_batch=budget, layout="shared_prefix"))
    shared_metrics = shared.train_step(group_batch)
    scale = max(float(g.abs().max()) for g in grads(padded))
    worst = max(float((a - b).abs().max()) for a, b in zip(grads(padded), grads(shared), strict=True))
    assert worst <= 2e-6 * scale, f"gradients differ by {worst} (largest gradient {scale})"
    for key in ("loss/total", "loss/entropy", "train/grad_norm", "train/tokens", "train/trainable_tokens"):
        assert shared_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-5, abs=1e-7), key
    assert shared_metrics["schedule/shared_prefix_tokens"] > 0
    if budget == 4096:  # one micro-batch: each group's prompt (all but its last token) runs once, not four times, and
        # the two compacted samples' common context (11, 12, 13) once, not twice
        assert shared_metrics["schedule/shared_prefix_tokens"] == 3 * 11 + 3 * 16 + 3


def test_gradient_is_clipped_to_max_norm_and_the_raw_norm_reported(tiny_model_dir, mixed_batch):
    backend = make_backend(tiny_model_dir, max_grad_norm=1e-3)
    metrics = backend.train_step(mixed_batch)
    clipped = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads(backend)]))
    assert metrics["train/grad_norm"] > 1e-2
    assert float(clipped) == pytest.approx(1e-3, rel=1e-4)


def test_kl_to_the_base_model_starts_at_zero_and_grows(tiny_model_dir, mixed_batch):
    backend = make_backend(tiny_model_dir, loss=LossConfig(kl_coef=0.1))
    first = backend.train_step(mixed_batch)
    second = backend.train_step(mixed_batch)
    assert abs(first["loss/kl"]) < 1e-6 and second["loss/kl"] > 1e-4


def test_resume_from_checkpoint_gives_an_identical_next_step(tiny_model_dir, mixed_batch, tmp_path):
    reversed_batch = TrainBatch.of(mixed_batch.samples, -mixed_batch.advantages_S)
    original = make_backend(tiny_model_dir)
    original.train_step(mixed_batch)
    path, version = original.save_checkpoint(tmp_path)
    assert (path.name, version) == ("step-000001", 1)
    expected = original.train_step(reversed_batch)
    resumed = make_backend(tiny_model_dir, resume_from=path)
    assert (resumed.policy_version, resumed.step, resumed.optimizer_updates) == (1, 1, 1)
    got = resumed.train_step(reversed_batch)
    for mine, theirs in zip(original.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    assert got["loss/total"] == expected["loss/total"] and resumed.policy_version == 2


def test_lr_zero_is_a_control_the_step_runs_and_no_weight_changes(tiny_model_dir, mixed_batch):
    """An lr sweep's control arm: the loss and gradients are computed, AdamW's decoupled weight decay is scaled by
    the lr too, so not one weight moves; a negative lr is refused."""
    backend = make_backend(tiny_model_dir, lr=0.0, weight_decay=0.1)
    before = [p.detach().clone() for p in backend.model.parameters()]
    metrics = backend.train_step(mixed_batch)
    assert metrics["train/grad_norm"] > 1e-3 and backend.policy_version == 1
    assert all(torch.equal(a, b) for a, b in zip(backend.model.parameters(), before, strict=True))
    with pytest.raises(ValueError, match="lr >= 0"):
        OptimizerConfig(lr=-1e-6)


def layer_weights(backend: TorchBackend) -> list[torch.Tensor]:
    return [p.detach().clone() for name, p in backend.model.named_parameters() if "layers" in name]


def test_bf16_training_keeps_small_updates_in_fp32_master_weights(tiny_model_dir, mixed_batch):
    """At lr 1e-5 one AdamW step (~1e-5) is below a bf16 weight's resolution (~1e-4 at 0.02): without fp32 master
    weights 16% of the layer weights ever changed over 8 steps (fp32 training: 81%); with them the steps add up."""
    backend = make_backend(tiny_model_dir, lr=1e-5, dtype="bfloat16", weight_decay=0.0)
    before = layer_weights(backend)
    for _ in range(8):
        backend.train_step(mixed_batch)
    after = layer_weights(backend)
    changed = sum(int((a != b).sum()) for a, b in zip(after, before, strict=True))
    assert all(a.dtype == torch.bfloat16 for a in after)
    assert changed / sum(b.numel() for b in before) > 0.5


def test_bf16_resume_restores_the_master_weights(tiny_model_dir, mixed_batch, tmp_path):
    original = make_backend(tiny_model_dir, lr=1e-5, dtype="bfloat16")
    original.train_step(mixed_batch)
    path, _ = original.save_checkpoint(tmp_path)
    resumed = make_backend(tiny_model_dir, lr=1e-5, dtype="bfloat16", resume_from=path)
    for mine, theirs in zip(original.master.params, resumed.master.params, strict=True):
        assert mine.dtype == torch.float32 and torch.equal(mine, theirs)
    original.train_step(mixed_batch)
    resumed.train_step(mixed_batch)
    for mine, theirs in zip(original.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_warmup_is_linear_then_flat():
    assert [warmup_lr(1.0, i, 4) for i in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup_lr(3e-6, 0, 0) == 3e-6


def test_several_workers_and_unloaded_use_are_refused(tiny_model_dir, mixed_batch):
    with pytest.raises(ValueError, match="num_workers=2"):
        TorchBackendConfig(tiny_model_dir, schedule=ScheduleConfig(num_workers=2))
    with pytest.raises(RuntimeError, match="call load"):
        TorchBackend(TorchBackendConfig(tiny_model_dir)).train_step(mixed_batch)
    with pytest.raises(ValueError, match="one advantage per sample"):
        TrainBatch.of(mixed_batch.samples, [1.0])


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({}, False),
        ({"logit_scale": 1.0}, False),
        ({"final_logit_softcapping": 30.0}, True),
        ({"logit_scale": 0.5}, True),
    ],
)
def test_models_that_transform_logits_after_the_head_are_refused(fields, refused):
    from types import SimpleNamespace

    from trainer.backends.token_logprobs import check_plain_output_head

    if refused:
        with pytest.raises(ValueError, match="transformed after the output head"):
            check_plain_output_head(SimpleNamespace(**fields))
    else:
        check_plain_output_head(SimpleNamespace(**fields))


@pytest.mark.parametrize("max_tokens", [40, 4096])
def test_batch_gradient_is_the_update_s_gradient_and_changes_nothing(tiny_model_dir, mixed_batch, whole_update,
                                                                     max_tokens):
    whole_grads, _ = whole_update
    backend = make_backend(tiny_model_dir, schedule=ScheduleConfig(max_tokens_per_micro_batch=max_tokens))
    before = [p.detach().clone() for p in backend.model.parameters()]
    gradient = backend.batch_gradient(mixed_batch)
    assert torch.allclose(gradient, torch.cat([g.flatten() for g in whole_grads]), atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(before, backend.model.parameters(), strict=True))
    assert backend.policy_version == 0 and all(p.grad is None for p in backend.model.parameters())
    flipped = TrainBatch.of(mixed_batch.samples, -mixed_batch.advantages_S)  # on-policy: linear in the advantages
    assert torch.allclose(backend.batch_gradient(flipped), -gradient, atol=1e-6)


def test_bf16_on_a_cpu_without_bf16_units_is_warned_about_naming_the_setting(tiny_model_dir, monkeypatch, caplog):
    import logging

    from engines import cpu_bf16

    monkeypatch.setattr(cpu_bf16, "this_cpu_native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="harnessrl.engines"):
        make_backend(tiny_model_dir, lr=1e-5, dtype="float32")
        assert not caplog.records
        make_backend(tiny_model_dir, lr=1e-5, dtype="bfloat16")
    assert ["backend.torch.dtype" in r.getMessage() for r in caplog.records] == [True]
