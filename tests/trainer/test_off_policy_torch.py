"""Off-policy correction and metrics in the torch backend on the tiny model: mismatch of a known perturbation of the
recorded logprobs, lag grouping, decoupled PPO's recomputation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.engine.support import teacher_forced_logprobs
from trainer.backends.base import TrainBatch
from trainer.backends.torch import OptimizerConfig, TorchBackend, TorchBackendConfig
from trainer.losses import LossConfig
from trainer.off_policy import OffPolicyConfig
from trainer.samples import RecordedCall, build_samples
from trainer.scheduling import ScheduleConfig

PROMPT = (1, 504, 2116, 4193, 17423)
RESPONSES = ((28, 1123, 905, 42), (9050, 17, 2210), (300, 61, 4, 7711, 48000))
DELTAS = ((0.1, -0.2, 0.0, 0.05), (0.3, -0.1, 0.2), (0.0, -0.4, 0.1, 0.25, -0.05))
"""Added to the model's own logprobs to make the recorded ones (a known engine-trainer mismatch)."""


@pytest.fixture(scope="module")
def base_model(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


def make_backend(model_dir: Path, *, off_policy: OffPolicyConfig = OffPolicyConfig(), version: int = 0,
                 num_updates: int = 1) -> TorchBackend:
    backend = TorchBackend(
        TorchBackendConfig(
            model_dir,
            optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=None),
            loss=LossConfig(off_policy=off_policy),
            schedule=ScheduleConfig(num_updates=num_updates),
            initial_version=version,
        )
    )
    backend.load()
    return backend


def perturbed_batch(model: torch.nn.Module, versions: tuple[int, ...], deltas=DELTAS) -> TrainBatch:
    """One rollout per response, sampled by `versions[i]`, recorded logprobs = the model's + deltas[i]."""
    calls = []
    for index, (response, shifts) in enumerate(zip(RESPONSES, deltas, strict=True)):
        own = teacher_forced_logprobs(model, list(PROMPT), list(response))
        recorded = tuple(lp + d for lp, d in zip(own, shifts, strict=True))
        calls.append(RecordedCall(f"r{index}", "g", 0, PROMPT, response, recorded, versions[index], True, "stop"))
    return TrainBatch.of(build_samples(calls).samples, [1.0, -0.5, 0.25])


def grads(backend: TorchBackend) -> list[torch.Tensor]:
    return [p.grad.clone() for p in backend.model.parameters()]


def test_lag0_mismatch_of_a_known_perturbation(tiny_model_dir, base_model):
    metrics = make_backend(tiny_model_dir).train_step(perturbed_batch(base_model, (0, 0, 0)))
    deltas = np.abs(np.concatenate(DELTAS))
    assert metrics["off_policy/lag0_tokens"] == deltas.size
    assert metrics["off_policy/lag0_abs_diff_mean"] == pytest.approx(deltas.mean(), abs=1e-5)
    assert metrics["off_policy/lag0_abs_diff_max"] == pytest.approx(deltas.max(), abs=1e-5)
    ratios = np.exp(-np.concatenate(DELTAS))  # trainer / recorded
    assert metrics["off_policy/lag0_k3"] == pytest.approx(np.mean(ratios - np.log(ratios) - 1), abs=1e-5)
    assert metrics["off_policy/lag0_ratio_min"] == pytest.approx(ratios.min(), rel=1e-4)
    assert metrics["off_policy/lag0_ratio_max"] == pytest.approx(ratios.max(), rel=1e-4)
    assert metrics["off_policy/measured_token_fraction"] == 1.0


def test_tokens_are_grouped_by_lag_behind_the_trainer(tiny_model_dir, base_model):
    metrics = make_backend(tiny_model_dir, version=2).train_step(perturbed_batch(base_model, (2, 1, 0)))
    assert [metrics[f"off_policy/lag{k}_tokens"] for k in (0, 1, 2)] == [4, 3, 5]
    assert metrics["off_policy/lag1_abs_diff_max"] == pytest.approx(0.3, abs=1e-5)
    assert metrics["off_policy/lag2_ratio_max"] == pytest.approx(np.exp(0.4), rel=1e-4)


def test_without_recomputation_only_the_first_update_is_measured(tiny_model_dir, base_model):
    metrics = make_backend(tiny_model_dir, num_updates=3).train_step(perturbed_batch(base_model, (0, 0, 0)))
    assert 0.0 < metrics["off_policy/measured_token_fraction"] < 1.0


def test_decoupled_equals_bypass_when_the_recorded_logprobs_are_the_trainers(tiny_model_dir, base_model):
    on_policy = perturbed_batch(base_model, (0, 0, 0), deltas=tuple(tuple(0.0 for _ in d) for d in DELTAS))
    bypass = make_backend(tiny_model_dir)
    bypass.train_step(on_policy)
    decoupled = make_backend(tiny_model_dir, off_policy=OffPolicyConfig(recompute_behaviour=True))
    metrics = decoupled.train_step(on_policy)
    assert metrics["off_policy/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    for a, b in zip(grads(bypass), grads(decoupled), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_decoupled_weights_tokens_by_proximal_over_behaviour(tiny_model_dir, base_model):
    backend = make_backend(tiny_model_dir, off_policy=OffPolicyConfig(recompute_behaviour=True, tis_cap=1.2))
    metrics = backend.train_step(perturbed_batch(base_model, (0, 0, 0)))
    weights = np.exp(-np.concatenate(DELTAS))  # pi_prox / pi_behav: the recorded ones are the model's + delta
    assert metrics["off_policy/is_weight_mean"] == pytest.approx(weights.mean(), abs=1e-5)
    assert metrics["off_policy/is_truncated_fraction"] == pytest.approx(np.mean(weights > 1.2))
    assert metrics["off_policy/lag0_abs_diff_mean"] == pytest.approx(np.abs(np.concatenate(DELTAS)).mean(), abs=1e-5)
    assert metrics["off_policy/measured_token_fraction"] == 1.0
