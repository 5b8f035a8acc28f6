"""The generation thread in-process: rows join mid-flight and stay exact, stopping rules, drains, cancels."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engines.serving.model_holder import ModelHolder
from engines.serving.sampling import RowSampling
from engines.serving.scheduler import (
    Admitted,
    GenerationParams,
    GenerationRequest,
    GenerationScheduler,
    TokenEvent,
)
from tests.engine.support import assert_teacher_forced

SAMPLED = RowSampling(temperature=1.0, top_p=1.0, top_k=-1)


class Collector:
    """Records a request's events (shared log for ordering across requests)."""

    def __init__(self, name: str, log: list, n: int = 1) -> None:
        self.name, self.log, self.open = name, log, n
        self.events: list = []
        self.done = threading.Event()

    def __call__(self, event) -> None:
        self.events.append(event)
        self.log.append((self.name, event))
        if isinstance(event, TokenEvent) and event.finish_reason is not None:
            self.open -= 1
            if self.open == 0:
                self.done.set()

    def tokens(self, choice: int = 0) -> list[TokenEvent]:
        return [e for e in self.events if isinstance(e, TokenEvent) and e.choice == choice]


@pytest.fixture(scope="module")
def scheduler(tiny_model_dir: Path):
    engine = GenerationScheduler(ModelHolder(tiny_model_dir), max_batch_size=8)
    engine.start()
    yield engine
    engine.stop()


def submit(scheduler, name: str, log: list, prompt: list[int], **params) -> Collector:
    collector = Collector(name, log, params.get("n", 1))
    params.setdefault("sampling", SAMPLED)
    scheduler.submit(GenerationRequest(prompt, GenerationParams(**params), collector))
    return collector


def wait_for_tokens(collector: Collector, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(collector.tokens()) < count and time.monotonic() < deadline:
        time.sleep(0.001)


def test_requests_join_a_running_batch_and_every_logprob_is_exact(scheduler, reference_model) -> None:
    log: list = []
    first = submit(scheduler, "first", log, list(range(100, 140)), max_tokens=60, seed=1)
    wait_for_tokens(first, 3)
    joiners = [submit(scheduler, f"join{i}", log, list(range(200, 205 + 11 * i)), max_tokens=5 + 4 * i,
                      seed=i, n=2) for i in range(3)]
    for collector in [first, *joiners]:
        assert collector.done.wait(60)
    order = [name for name, event in log if isinstance(event, TokenEvent)]
    last_first = max(i for i, name in enumerate(order) if name == "first")
    assert any(name.startswith("join") for name in order[:last_first]), "joiners must run alongside 'first'"
    for collector, prompt in [(first, list(range(100, 140)))] + [
            (c, list(range(200, 205 + 11 * i))) for i, c in enumerate(joiners)]:
        for choice in range(2 if collector is not first else 1):
            tokens = collector.tokens(choice)
            assert_teacher_forced(reference_model, prompt, [t.token_id for t in tokens],
                                  [t.logprob for t in tokens])


def test_end_of_sequence_is_returned_as_token_but_not_as_text(scheduler) -> None:
    log: list = []
    probe = submit(scheduler, "probe", log, [1, 2, 3, 4], max_tokens=8, seed=5)
    assert probe.done.wait(30)
    ids = [t.token_id for t in probe.tokens()]
    cut = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
    holder = scheduler.holder
    original = holder.eos_token_ids
    holder.eos_token_ids = [ids[cut]]
    try:
        stopped = submit(scheduler, "stopped", log, [1, 2, 3, 4], max_tokens=8, seed=5)
        assert stopped.done.wait(30)
    finally:
        holder.eos_token_ids = original
    tokens = stopped.tokens()
    assert [t.token_id for t in tokens] == ids[:cut + 1]
    assert (tokens[-1].finish_reason, tokens[-1].stop_reason) == ("stop", None)
    expected_text = holder.tokenizer.decode(ids[:cut], skip_special_tokens=True)
    assert "".join(t.text_delta for t in tokens) == expected_text


def test_weight_operations_wait_for_the_running_batch(scheduler) -> None:
    log: list = []
    running = submit(scheduler, "running", log, [7, 8, 9], max_tokens=40, seed=3)
    wait_for_tokens(running, 1)
    seen_when_applied = scheduler.control(lambda: len(running.tokens())).result(timeout=60)
    assert seen_when_applied == 40
    later = submit(scheduler, "later", log, [7, 8, 9], max_tokens=2, seed=3)
    assert later.done.wait(30)
    admitted = [e for e in later.events if isinstance(e, Admitted)]
    assert admitted == [Admitted(scheduler.holder.policy_version)]


def test_cancelled_requests_leave_the_batch(scheduler) -> None:
    log: list = []
    request_log = Collector("cancelled", log)
    request = GenerationRequest([3, 4, 5], GenerationParams(SAMPLED, max_tokens=3000), request_log)
    scheduler.submit(request)
    wait_for_tokens(request_log, 2)
    request.cancelled = True
    deadline = time.monotonic() + 10
    while scheduler.running_rows and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scheduler.running_rows == 0
    assert len(request_log.tokens()) < 3000


def test_max_batch_size_must_be_positive(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="max_batch_size=0"):
        GenerationScheduler(object(), max_batch_size=0)  # type: ignore[arg-type]
