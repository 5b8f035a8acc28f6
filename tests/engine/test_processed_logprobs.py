"""The embedded engine reports the logprobs of the distribution each token was sampled from (issue 14, point 2):
softmax(logits / T) restricted to the top-k / min-p / top-p kept set, renormalised; greedy rows and `raw` mode report
the raw distribution's. Checked against a float64 hand computation from the tiny model's own logits."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from engines.embedded import EmbeddedEngine
from engines.serving.model_holder import ModelHolder
from engines.serving.sampling import REPORTED_LOGPROB_FLOOR, RowSampling, row_generator, sample_step
from engines.serving.scheduler import (
    Failed,
    GenerationParams,
    GenerationRequest,
    GenerationScheduler,
    TokenEvent,
)
from tests.engine.support import logits_at, processed_reference

PROMPT = list(range(300, 320))
ATOL = 1e-4


def generate(scheduler: GenerationScheduler, sampling: RowSampling, *, max_tokens: int = 12, top_logprobs: int = 4,
             seed: int = 3) -> list[TokenEvent]:
    events: list = []
    done = threading.Event()

    def emit(event) -> None:
        events.append(event)
        if isinstance(event, Failed) or (isinstance(event, TokenEvent) and event.finish_reason is not None):
            done.set()

    params = GenerationParams(sampling=sampling, max_tokens=max_tokens, ignore_eos=True, seed=seed,
                              top_logprobs=top_logprobs)
    scheduler.submit(GenerationRequest(PROMPT, params, emit))
    assert done.wait(60), "the engine did not finish"
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert len(tokens) == max_tokens, events
    return tokens


@pytest.fixture(scope="module")
def schedulers(tiny_model_dir: Path):
    """An engine thread per logprobs mode over the tiny model."""
    engines = {mode: GenerationScheduler(ModelHolder(tiny_model_dir), max_batch_size=4, logprobs_mode=mode)
               for mode in ("processed", "raw")}
    for engine in engines.values():
        engine.start()
    yield engines
    for engine in engines.values():
        engine.stop()


def assert_reported(tokens: list[TokenEvent], reference_TV: np.ndarray) -> None:
    """Each token's logprob and its top alternatives (ids and values, -inf floored) equal the reference rows."""
    for event, reference_V in zip(tokens, reference_TV, strict=True):
        assert math.isfinite(reference_V[event.token_id]), "the sampled token lies outside the kept set"
        assert event.logprob == pytest.approx(reference_V[event.token_id], abs=ATOL)
        floored_V = np.maximum(reference_V, REPORTED_LOGPROB_FLOOR)
        for token_id, logprob in event.top:
            assert logprob == pytest.approx(floored_V[token_id], abs=ATOL)
        best = sorted(floored_V, reverse=True)[:len(event.top)]
        assert [lp for _, lp in event.top] == pytest.approx(best, abs=ATOL)


def test_processed_logprobs_are_those_of_the_tempered_nucleus(schedulers, reference_model) -> None:
    tokens = generate(schedulers["processed"], RowSampling(temperature=0.7, top_p=0.9, top_k=0))
    logits_TV = logits_at(reference_model, PROMPT, [e.token_id for e in tokens])
    reference_TV = np.stack([processed_reference(row, 0.7, top_p=0.9) for row in logits_TV])
    assert_reported(tokens, reference_TV)
    raw_TV = np.stack([processed_reference(row, 1.0) for row in logits_TV])
    worst = max(abs(e.logprob - raw_TV[t, e.token_id]) for t, e in enumerate(tokens))
    assert worst > 0.05, "at T = 0.7 the processed logprobs must differ from the raw ones"


def test_top_k_leaves_floored_alternatives_and_min_p_applies(schedulers, reference_model) -> None:
    sampling = RowSampling(temperature=1.3, top_p=1.0, top_k=2, min_p=0.0)
    tokens = generate(schedulers["processed"], sampling, top_logprobs=4)
    logits_TV = logits_at(reference_model, PROMPT, [e.token_id for e in tokens])
    assert_reported(tokens, np.stack([processed_reference(row, 1.3, top_k=2) for row in logits_TV]))
    assert all([lp for _, lp in e.top][2:] == [REPORTED_LOGPROB_FLOOR] * 2 for e in tokens)
    sampling = RowSampling(temperature=0.5, top_p=1.0, top_k=0, min_p=0.6)
    tokens = generate(schedulers["processed"], sampling, seed=5)
    logits_TV = logits_at(reference_model, PROMPT, [e.token_id for e in tokens])
    assert_reported(tokens, np.stack([processed_reference(row, 0.5, min_p=0.6) for row in logits_TV]))


@pytest.mark.parametrize(("mode", "sampling"), [
    ("raw", RowSampling(temperature=0.7, top_p=0.9, top_k=0)),
    ("processed", RowSampling(temperature=0.0, top_p=0.9, top_k=5)),  # greedy: the raw distribution's
], ids=["raw mode", "greedy"])
def test_raw_mode_and_greedy_rows_report_the_raw_distribution(schedulers, reference_model, mode, sampling) -> None:
    tokens = generate(schedulers[mode], sampling)
    logits_TV = logits_at(reference_model, PROMPT, [e.token_id for e in tokens])
    assert_reported(tokens, np.stack([processed_reference(row, 1.0) for row in logits_TV]))


def test_sample_step_draws_from_and_reports_the_same_distribution() -> None:
    logits_BV = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]] * 2)
    rows = [RowSampling(temperature=0.7, top_p=0.8, top_k=0), RowSampling(temperature=0.0, top_p=1.0, top_k=0)]
    drawn = set()
    for seed in range(200):
        tokens_B, logprobs_BV = sample_step(logits_BV, rows, [row_generator(seed, 0), None])
        drawn.add(int(tokens_B[0]))
    expected_V = processed_reference(logits_BV[0].numpy(), 0.7, top_p=0.8)
    assert drawn == {i for i, v in enumerate(expected_V) if math.isfinite(v)}
    assert np.allclose(logprobs_BV[0].numpy(), expected_V, atol=1e-5)
    assert torch.allclose(logprobs_BV[1], torch.log_softmax(logits_BV[1], -1))
    with pytest.raises(ValueError, match="logprobs_mode='tempered'"):
        sample_step(logits_BV, rows, [None, None], "tempered")  # type: ignore[arg-type]


def test_health_says_which_logprobs_the_engine_reports(engine_url: str) -> None:
    assert httpx.get(f"{engine_url}/health", timeout=30).json()["logprobs_mode"] == "processed"


def test_an_unknown_logprobs_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="logprobs_mode='tempered'.*'processed'.*'raw'"):
        EmbeddedEngine("any-model", logprobs_mode="tempered")
    with pytest.raises(ValueError, match="logprobs_mode='tempered'"):
        GenerationScheduler(object(), logprobs_mode="tempered")  # type: ignore[arg-type]
