"""Issue 14 point 2 on the torch backend: a harness sampling at T = 0.7, top_p = 0.9 gets a PPO ratio of 1 at lag 0.

Tokens are drawn with the embedded engine's own sampling code (`engines.serving.sampling`) from the tiny model, and
their logprobs are those of the processed distribution (what the engines report for a call with `sampling`). They
are recorded as gateway calls with `sampling`, turned into samples, and scored by the torch backend with the same
weights: exp(new - old) is 1 within 1e-4 (fp32) for every token. Scored as the trainer did before (temperature and
top-p ignored), the same tokens are far from a ratio of 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from engines.serving.sampling import RowSampling, inverse_cdf_draw, sampling_probs_V
from tests.trainer.loop_support import call as call_record
from trainer.backends.model_inputs import build_model_inputs
from trainer.backends.token_logprobs import token_logprobs
from trainer.backends.torch import TorchBackend, TorchBackendConfig
from trainer.losses import LossDenominators
from trainer.recorded import to_recorded_call
from trainer.samples import build_samples
from trainer.sampling import PLAIN
from trainer.scheduling import ScheduleConfig, schedule

PROMPT = (1, 504, 3237, 314, 260, 1345, 28)
RESPONSE_TOKENS = 24


def engine_sample(model: torch.nn.Module, prompt: list[int], row: RowSampling, seed: int) -> tuple[list, list]:
    """`RESPONSE_TOKENS` tokens drawn as the embedded engine draws them, with the processed distribution's logprobs."""
    generator = torch.Generator().manual_seed(seed)
    ids, logprobs = list(prompt), []
    with torch.inference_mode():
        for _ in range(RESPONSE_TOKENS):
            logits_V = model(input_ids=torch.tensor([ids])).logits[0, -1]
            probs_V = sampling_probs_V(logits_V, row)
            token = inverse_cdf_draw(probs_V, generator)
            ids.append(token)
            logprobs.append(float(torch.log(probs_V[token])))
    return ids[len(prompt):], logprobs


def sampling_record(row: RowSampling) -> dict:
    return {"temperature": row.temperature, "top_p": row.top_p, "top_k": row.top_k, "min_p": 0.0,
            "requested": {"temperature": row.temperature, "top_p": row.top_p}, "enforced": False}


def lag0_ratios(backend: TorchBackend, samples) -> np.ndarray:
    """exp(new - old) of every trainable token, new from the backend's logprob computation on its own weights."""
    plan = schedule(samples, ScheduleConfig())
    denominators = LossDenominators.from_sequences([s.rollout_id for s in samples],
                                                   [s.num_trainable_tokens for s in samples])
    ratios = []
    for update in plan.updates:
        for micro_batch in update.workers[0].micro_batches:
            inputs = build_model_inputs(samples, np.ones(len(samples)), micro_batch, layout="packed",
                                        denominators=denominators, agg_mode="token-mean", pad_token_id=0)
            with torch.inference_mode():
                new_N = token_logprobs(backend.model, inputs).logprobs_N
            ratios.append(torch.exp(new_N - inputs.loss.old_logprobs_T).numpy())
    return np.concatenate(ratios)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Small forward passes: one intra-op thread (on a busy 2-core machine thread hand-offs dominate)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def backend(tiny_model_dir) -> TorchBackend:
    loaded = TorchBackend(TorchBackendConfig(model_path=tiny_model_dir))
    loaded.load()
    return loaded


@pytest.mark.parametrize("row", [RowSampling(temperature=0.7, top_p=0.9, top_k=0),
                                 RowSampling(temperature=1.3, top_p=1.0, top_k=20)])
def test_a_harness_sampling_its_own_way_gets_a_ratio_of_one_at_lag_0(backend, row):
    model = backend.model
    first, first_logprobs = engine_sample(model, list(PROMPT), row, seed=3)
    follow_prompt = [*PROMPT, *first, 198, 504]
    second, second_logprobs = engine_sample(model, follow_prompt, row, seed=4)
    records = [
        call_record("r1", 0, response=first, prompt=PROMPT, response_logprobs=first_logprobs,
                    sampling=sampling_record(row)),
        call_record("r1", 1, response=second, prompt=follow_prompt, response_logprobs=second_logprobs,
                    sampling=sampling_record(row)),
    ]
    built = build_samples([to_recorded_call(record, "g1") for record in records])
    (sample,) = built.samples
    assert sample.num_trainable_tokens == 2 * RESPONSE_TOKENS and sample.sampling.temperature == row.temperature

    ratios = lag0_ratios(backend, built.samples)
    assert ratios.shape == (2 * RESPONSE_TOKENS,)
    assert np.abs(ratios - 1).max() < 1e-4, f"max |ratio - 1| = {np.abs(ratios - 1).max():.2e}"

    ignored = lag0_ratios(backend, [replace(sample, sampling=PLAIN)])
    print(f"{row}: max |ratio - 1| {np.abs(ratios - 1).max():.2e} with the fix, "
          f"{np.abs(ignored - 1).max():.3f} (mean {np.abs(ignored - 1).mean():.3f}) with sampling ignored")
    assert np.abs(ignored - 1).max() > 0.05


def test_the_embedded_engine_server_answers_with_logprobs_the_backend_reproduces(backend, engine_url):
    """The same through the real engine process (KV cache, batching): its reported logprobs are the processed ones."""
    body = {"model": "tiny", "prompt": list(PROMPT), "max_tokens": RESPONSE_TOKENS, "logprobs": 0,
            "return_token_ids": True, "ignore_eos": True, "temperature": 0.7, "top_p": 0.9, "seed": 5}
    response = httpx.post(f"{engine_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    choice = response.json()["choices"][0]
    record = call_record("r1", 0, response=choice["token_ids"], prompt=PROMPT,
                         response_logprobs=choice["logprobs"]["token_logprobs"],
                         sampling=sampling_record(RowSampling(temperature=0.7, top_p=0.9, top_k=0)))
    samples = build_samples([to_recorded_call(record, "g1")]).samples
    ratios = lag0_ratios(backend, samples)
    assert ratios.shape == (RESPONSE_TOKENS,)
    assert np.abs(ratios - 1).max() < 1e-4, f"max |ratio - 1| = {np.abs(ratios - 1).max():.2e}"
    ignored = lag0_ratios(backend, [replace(samples[0], sampling=PLAIN)])
    assert np.abs(ignored - 1).max() > 0.05


def test_one_micro_batch_of_samples_drawn_with_different_parameters_scores_each_as_drawn():
    """Fast: a tiny in-memory Llama, three rollouts drawn at their own parameters packed into one micro-batch (the
    per-target temperature / top-p / top-k / min-p tensors): ratio 1 for every token."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)  # a peaked distribution, so the filters cut
    rows = [RowSampling(temperature=0.7, top_p=0.9, top_k=0), RowSampling(temperature=1.3, top_p=1.0, top_k=5),
            RowSampling(temperature=0.9, top_p=0.8, top_k=0, min_p=0.1)]
    records = []
    for index, row in enumerate(rows):
        prompt = [3 + index, 7, 11]
        response, logprobs = engine_sample(model, prompt, row, seed=index)
        records.append(call_record(f"r{index}", 0, response=response, prompt=prompt, response_logprobs=logprobs,
                                   sampling=sampling_record(row) | {"min_p": row.min_p}))
    samples = build_samples([to_recorded_call(record, "g1") for record in records]).samples
    backend = TorchBackend(TorchBackendConfig(model_path=Path("unused")))
    backend.model = model
    (micro_batch,) = schedule(samples, ScheduleConfig()).updates[0].workers[0].micro_batches
    assert len(micro_batch.sequences) == 3
    ratios = lag0_ratios(backend, samples)
    assert ratios.shape == (3 * RESPONSE_TOKENS,)
    assert np.abs(ratios - 1).max() < 1e-4, f"max |ratio - 1| = {np.abs(ratios - 1).max():.2e}"
    ignored = lag0_ratios(backend, [replace(s, sampling=PLAIN) for s in samples])
    assert np.abs(ignored - 1).max() > 0.05
