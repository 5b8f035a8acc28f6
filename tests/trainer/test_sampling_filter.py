"""The trainer's logprob of the processed distribution (temperature, top-k, min-p, top-p): the engine's semantics,
a brute-force numpy reference, its limits, its gradient, and the per-target parameter tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engines.serving import sampling as engine_sampling
from trainer.backends.sampling_filter import TargetSampling, kept_mask_NV, sampled_logprobs
from trainer.sampling import PLAIN, SamplingParams


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread (a busy 2-core machine makes thread hand-offs cost ~50 ms per op)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def targets_of(params: list[SamplingParams], counts: list[int] | None = None) -> TargetSampling:
    sampling = TargetSampling.from_params(params, counts or [1] * len(params))
    assert sampling is not None
    return sampling


def row_sampling(params: SamplingParams) -> engine_sampling.RowSampling:
    """The engine's RowSampling for `params` (min_p passed only where the engine has the field)."""
    fields = {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k}
    if "min_p" in engine_sampling.RowSampling.__dataclass_fields__:
        fields["min_p"] = params.min_p
    elif params.min_p:
        pytest.skip("the engine's sampling has no min_p")
    return engine_sampling.RowSampling(**fields)


def reference(logits_V: np.ndarray, target: int, p: SamplingParams) -> tuple[np.ndarray, float, float]:
    """Brute force in float64: (kept mask, logprob of target, entropy) of the processed distribution."""
    z = logits_V.astype(np.float64) / p.temperature
    keep = np.ones(z.shape, dtype=bool)
    if 0 < p.top_k < z.size:
        keep &= z >= np.sort(z)[::-1][p.top_k - 1]

    def probs(mask):
        e = np.where(mask, np.exp(z - z[mask].max()), 0.0)
        return e / e.sum()

    if p.min_p > 0:
        keep &= z - z.max() >= np.log(p.min_p)
    if p.top_p < 1:
        q = probs(keep)
        order = np.argsort(-q, kind="stable")
        before = np.cumsum(q[order]) - q[order]
        kept_sorted = before < p.top_p
        kept_sorted[0] = True
        top_p_keep = np.zeros_like(keep)
        top_p_keep[order] = kept_sorted
        keep &= top_p_keep
    keep[target] = True
    q = probs(keep)
    logprob = float(np.log(q[target]))
    entropy = float(-(q[keep] * np.log(q[keep])).sum())
    return keep, logprob, entropy


def margin_ok(logits_V: np.ndarray, p: SamplingParams) -> bool:
    """False when a top-p boundary sits within float32 rounding of a cumulative mass (either answer is right)."""
    if p.top_p >= 1:
        return True
    z = logits_V.astype(np.float64) / p.temperature
    q = np.exp(z - z.max())
    q /= q.sum()
    before = np.cumsum(np.sort(q)[::-1])
    return bool(np.min(np.abs(before - p.top_p)) > 1e-4)


TABLE = [
    (SamplingParams(temperature=0.7, top_p=0.9), 0),
    (SamplingParams(temperature=0.7, top_p=0.9), 5),
    (SamplingParams(temperature=1.0, top_k=3), 1),
    (SamplingParams(temperature=1.3, top_k=1), 0),
    (SamplingParams(temperature=0.5, top_k=4, top_p=0.6), 2),
    (SamplingParams(temperature=2.0, top_p=0.3), 3),
    (SamplingParams(temperature=0.9), 7),
    (SamplingParams(temperature=1.0, top_k=8), 6),
    (SamplingParams(temperature=0.8, min_p=0.2), 1),
]
TABLE_LOGITS = np.array([2.0, 1.5, 0.3, -0.2, 0.9, -1.0, 0.0, -2.5], dtype=np.float32)


@pytest.mark.parametrize(("params", "target"), TABLE)
def test_the_kept_set_and_logprob_match_the_embedded_engine(params, target):
    logits_V = torch.from_numpy(TABLE_LOGITS)
    engine_probs_V = engine_sampling.sampling_probs_V(logits_V, row_sampling(params))
    engine_keep_V = engine_probs_V > 0
    keep_V = kept_mask_NV(logits_V[None] / params.temperature, targets_of([params]), torch.tensor([target]))[0]
    if engine_keep_V[target]:
        assert keep_V.tolist() == engine_keep_V.tolist()
    else:
        assert keep_V.tolist() == (engine_keep_V | (torch.arange(8) == target)).tolist()
    logprob, _ = sampled_logprobs(logits_V[None], torch.tensor([target]), targets_of([params]))
    if engine_keep_V[target]:
        assert float(logprob) == pytest.approx(math.log(float(engine_probs_V[target])), abs=1e-5)


@pytest.mark.parametrize(("params", "target"), TABLE)
def test_the_table_matches_the_numpy_reference(params, target):
    keep, expected, entropy = reference(TABLE_LOGITS, target, params)
    logprob, got_entropy = sampled_logprobs(torch.from_numpy(TABLE_LOGITS)[None], torch.tensor([target]),
                                            targets_of([params]))
    assert float(logprob) == pytest.approx(expected, abs=1e-5)
    assert float(got_entropy) == pytest.approx(entropy, abs=1e-5)


VOCAB = 12
logit_rows = st.lists(st.integers(-24, 24), min_size=VOCAB, max_size=VOCAB, unique=True).map(
    lambda ints: np.array(ints, dtype=np.float32) / 4
)
params_strategy = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.3, 0.5, 0.7, 1.0, 1.5, 2.0]),
    top_p=st.sampled_from([0.2, 0.5, 0.9, 0.95, 1.0]),
    top_k=st.sampled_from([0, 1, 2, 5, 11, 12, 50]),
    min_p=st.sampled_from([0.0, 0.0, 0.05, 0.3]),
)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(logit_rows, st.integers(0, VOCAB - 1), params_strategy), min_size=1, max_size=5))
def test_a_batch_of_targets_with_their_own_parameters_matches_the_numpy_reference(rows):
    assume(all(margin_ok(logits, p) for logits, _, p in rows))
    # every row at the raw distribution: there is nothing to filter (TargetSampling.from_params is None; tested apart)
    assume(not all((p.temperature, p.top_p, p.top_k, p.min_p) == (1.0, 1.0, 0, 0.0) for _, _, p in rows))
    logits_NV = torch.from_numpy(np.stack([logits for logits, _, _ in rows]))
    targets_N = torch.tensor([target for _, target, _ in rows])
    sampling = targets_of([p for _, _, p in rows])
    logprobs_N, entropy_N = sampled_logprobs(logits_NV, targets_N, sampling)
    scaled_NV = logits_NV / sampling.temperature_N[:, None]
    keep_NV = kept_mask_NV(scaled_NV, sampling, targets_N)
    for n, (logits, target, p) in enumerate(rows):
        keep, logprob, entropy = reference(logits, target, p)
        assert keep_NV[n].tolist() == keep.tolist()
        assert float(logprobs_N[n]) == pytest.approx(logprob, abs=1e-5)
        assert float(entropy_N[n]) == pytest.approx(entropy, abs=1e-4)
        assert keep_NV[n, target] and math.isfinite(float(logprobs_N[n]))


@settings(max_examples=40, deadline=None)
@given(logits=logit_rows, target=st.integers(0, VOCAB - 1), top_p=st.sampled_from([0.1, 0.5, 0.9]),
       top_k=st.sampled_from([1, 2, 4]))
def test_the_sampled_token_is_kept_however_unlikely(logits, target, top_p, top_k):
    params = SamplingParams(temperature=0.5, top_p=top_p, top_k=top_k)
    logprob, _ = sampled_logprobs(torch.from_numpy(logits)[None], torch.tensor([target]), targets_of([params]))
    assert math.isfinite(float(logprob)) and float(logprob) <= 1e-6


@settings(max_examples=40, deadline=None)
@given(logits=logit_rows, target=st.integers(0, VOCAB - 1), temperature=st.sampled_from([0.4, 0.7, 1.0, 1.8]))
def test_without_filters_it_is_the_log_softmax_of_the_scaled_logits(logits, target, temperature):
    logits_1V = torch.from_numpy(logits)[None]
    params = SamplingParams(temperature=temperature, top_p=1.0, top_k=0)
    sampling = TargetSampling(torch.tensor([temperature]), torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0.0]))
    logprob, _ = sampled_logprobs(logits_1V, torch.tensor([target]), sampling)
    expected = torch.log_softmax(logits_1V / temperature, dim=-1)[0, target]
    assert float(logprob) == pytest.approx(float(expected), rel=1e-6, abs=1e-5)
    assert TargetSampling.from_params([params], [1]) is None or temperature != 1.0


@settings(max_examples=40, deadline=None)
@given(logits=logit_rows, target=st.integers(0, VOCAB - 1))
def test_temperature_one_is_the_plain_log_softmax_and_the_limit_is_continuous(logits, target):
    logits_1V = torch.from_numpy(logits)[None].double()
    plain, _ = sampled_logprobs(logits_1V, torch.tensor([target]), None)
    assert float(plain) == pytest.approx(float(torch.log_softmax(logits_1V.float(), -1)[0, target]), abs=1e-6)
    for temperature in (1.0001, 0.9999):
        near, _ = sampled_logprobs(logits_1V, torch.tensor([target]), targets_of([SamplingParams(temperature)]))
        assert float(near) == pytest.approx(float(plain), abs=0.01)


def test_the_kept_set_carries_no_gradient_and_the_renormalisation_does():
    logits_1V = torch.from_numpy(TABLE_LOGITS)[None].clone().requires_grad_(True)
    params = SamplingParams(temperature=0.7, top_p=0.9)
    logprob, _ = sampled_logprobs(logits_1V, torch.tensor([1]), targets_of([params]))
    logprob.sum().backward()
    keep, _, _ = reference(TABLE_LOGITS, 1, params)
    z = TABLE_LOGITS.astype(np.float64) / 0.7
    q = np.where(keep, np.exp(z - z.max()), 0.0)
    q /= q.sum()
    expected = ((np.arange(8) == 1) - q) / 0.7
    assert logits_1V.grad[0].numpy() == pytest.approx(expected, abs=1e-5)
    assert (logits_1V.grad[0][torch.from_numpy(~keep)] == 0).all()


def test_entropy_gradient_only_when_asked():
    logits_1V = torch.from_numpy(TABLE_LOGITS)[None].clone().requires_grad_(True)
    sampling = targets_of([SamplingParams(temperature=0.7, top_k=3)])
    _, entropy = sampled_logprobs(logits_1V, torch.tensor([0]), sampling)
    assert not entropy.requires_grad
    _, entropy = sampled_logprobs(logits_1V, torch.tensor([0]), sampling, entropy_grad=True)
    assert entropy.requires_grad and math.isfinite(float(entropy.detach()))


def test_target_parameters_repeat_per_sample_and_plain_batches_take_the_fast_path():
    warm, plain = SamplingParams(temperature=0.7, top_p=0.9), SamplingParams()
    assert TargetSampling.from_params([plain, plain], [3, 2]) is None
    sampling = targets_of([warm, plain], [2, 3])
    assert sampling.temperature_N.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0])
    assert sampling.top_p_N.tolist() == pytest.approx([0.9, 0.9, 1.0, 1.0, 1.0])
    assert sampling.top_k_N.tolist() == [0] * 5 and sampling.min_p_N.tolist() == [0.0] * 5
    assert TargetSampling.from_params([SamplingParams(temperature=0.0), plain], [0, 2]) is None
    with pytest.raises(ValueError, match="does not recompute"):
        TargetSampling.from_params([SamplingParams(temperature=0.0), warm], [1, 2])


def test_kept_sets_computed_in_row_chunks_equal_one_pass(monkeypatch):
    from trainer.backends import sampling_filter

    generator = torch.Generator().manual_seed(1)
    logits_NV = torch.randn(7, 40, generator=generator) * 3
    params = [SamplingParams(0.7, 0.9), SamplingParams(1.2, 1.0, 5), SamplingParams(0.8, 0.5, 0, 0.1)] * 2 + [PLAIN]
    sampling = targets_of(params)
    targets_N = torch.arange(7) * 5
    whole = kept_mask_NV(logits_NV / sampling.temperature_N[:, None], sampling, targets_N)
    monkeypatch.setattr(sampling_filter, "MASK_ROWS_PER_CHUNK", 2)
    chunked = kept_mask_NV(logits_NV / sampling.temperature_N[:, None], sampling, targets_N)
    assert torch.equal(whole, chunked) and not whole.all()
    for n in range(7):
        keep, _, _ = reference(logits_NV[n].numpy(), int(targets_N[n]), params[n])
        assert whole[n].tolist() == keep.tolist()
