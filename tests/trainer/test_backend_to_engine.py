"""A torch-backend step on the engine's own rollouts, checkpointed and loaded by the running embedded engine."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.engine.support import assert_teacher_forced, teacher_forced_logprobs
from trainer.backends.base import TrainBatch
from trainer.backends.torch import OptimizerConfig, TorchBackend, TorchBackendConfig
from trainer.samples import RecordedCall, build_samples

PROMPT = [1, 504, 2116, 4193, 17423]


def engine_complete(engine_url: str, **sampling) -> dict:
    """One completion for PROMPT with token IDs and raw logprobs: (token_ids, logprobs, policy_version)."""
    body = {
        "model": "tiny",
        "prompt": PROMPT,
        "max_tokens": 6,
        "logprobs": 0,
        "return_token_ids": True,
        "ignore_eos": True,
        **sampling,
    }
    response = httpx.post(f"{engine_url}/v1/completions", json=body, timeout=60)
    response.raise_for_status()
    answer = response.json()
    choice = answer["choices"][0]
    return {
        "tokens": choice["token_ids"],
        "logprobs": choice["logprobs"]["token_logprobs"],
        "version": answer["policy_version"],
    }


def as_call(rollout_id: str, answer: dict) -> RecordedCall:
    return RecordedCall(
        rollout_id,
        "g0",
        0,
        tuple(PROMPT),
        tuple(answer["tokens"]),
        tuple(answer["logprobs"]),
        answer["version"],
        True,
        "length",
    )


def test_checkpoint_reaches_the_engine_with_the_new_version_and_logprobs(
    embedded_engine, tiny_model_dir: Path, tmp_path: Path
):
    from transformers import AutoModelForCausalLM

    url = embedded_engine.base_url
    greedy = engine_complete(url, temperature=0)
    sampled = engine_complete(url, temperature=1.0, seed=11)
    assert greedy["version"] == sampled["version"] == 0 and greedy["tokens"] != sampled["tokens"]
    backend = TorchBackend(TorchBackendConfig(tiny_model_dir, optimizer=OptimizerConfig(lr=1e-3)))
    backend.load()
    samples = build_samples([as_call("pos", greedy), as_call("neg", sampled)]).samples
    metrics = backend.train_step(TrainBatch.of(samples, [1.0, -1.0]))
    assert abs(metrics["loss/ppo_kl"]) < 1e-4, "the engine's logprobs are the policy's: the ratio starts at 1"
    path, version = backend.save_checkpoint(tmp_path)
    trained = AutoModelForCausalLM.from_pretrained(path).eval()
    assert sum(teacher_forced_logprobs(trained, PROMPT, sampled["tokens"])) < sum(sampled["logprobs"]) - 0.1
    try:
        embedded_engine.update_weights(path, version)
        assert embedded_engine.health()["policy_version"] == version == 1
        greedy_after = engine_complete(url, temperature=0)
        sampled_after = engine_complete(url, temperature=1.0, seed=11)
    finally:
        embedded_engine.update_weights(tiny_model_dir, 0)
    assert greedy_after["version"] == sampled_after["version"] == 1
    # The engine serves exactly the checkpoint: its logprobs are the checkpoint's teacher-forced ones.
    assert_teacher_forced(trained, PROMPT, greedy_after["tokens"], greedy_after["logprobs"])
    assert_teacher_forced(trained, PROMPT, sampled_after["tokens"], sampled_after["logprobs"])
    # The positively rewarded greedy answer stays greedy and became more likely.
    assert greedy_after["tokens"] == greedy["tokens"]
    assert sum(greedy_after["logprobs"]) > sum(greedy["logprobs"]) + 0.1
    assert max(abs(a - b) for a, b in zip(greedy_after["logprobs"], greedy["logprobs"], strict=True)) > 1e-3
    assert engine_complete(url, temperature=0)["version"] == 0
