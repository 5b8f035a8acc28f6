"""The generation thread: continuous batching of concurrent requests over one model.

Requests join the running batch at step boundaries (their prompts are prefilled together and their cache
merged in; a prompt that starts with the tokens of a prompt prefilled earlier or of a finished row reuses that KV and
prefills only the rest, `engines.serving.prefix_cache`; prompts arriving together that share a prefix are prefilled
after the first of them), finished rows leave it, and every row keeps its own sampling parameters, generator and
stopping rules. Weight operations (sleep, wake-up, update) stop admission, wait until the running batch has drained,
then run, so every response is produced by exactly one policy version.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from engines.serving import kv_batch
from engines.serving.detokenizer import ChoiceText
from engines.serving.model_holder import ModelHolder
from engines.serving.prefix_cache import PrefixCache, PrefixHit, common_prefix_len
from engines.serving.prefix_constraint import Continuations, allowed_next_tokens, constrain_logits_BV
from engines.serving.sampling import (
    LOGPROBS_MODES,
    REPORTED_LOGPROB_FLOOR,
    LogprobsMode,
    RowSampling,
    row_generator,
    sample_step,
    top_logprobs_BK,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationParams:
    """Everything that decides how one request's choices are generated and when they stop."""

    sampling: RowSampling
    """Temperature, top-p and top-k of every choice."""
    max_tokens: int
    """Most tokens generated per choice."""
    stop: tuple[str, ...] = ()
    """Stop strings; the text is cut before the first one that appears."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end a choice (besides end-of-sequence)."""
    ignore_eos: bool = False
    """Keep generating past end-of-sequence tokens."""
    include_stop_str: bool = False
    """Keep the matched stop string (or stop token text) in the text."""
    seed: int | None = None
    """Makes sampling reproducible; None draws a fresh random seed."""
    n: int = 1
    """Number of choices."""
    top_logprobs: int = 0
    """Alternatives reported per token (0: only the sampled token's logprob)."""
    continuations: Continuations = ()
    """Token sequences every choice must begin with one of (a forced tool call's function name:
    `engines.serving.prefix_constraint`); empty: unconstrained."""


@dataclass(frozen=True)
class Admitted:
    """First event of a request: generation started under this policy version."""

    policy_version: int
    """Version of the weights that produce every token of this request."""


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token of one choice."""

    choice: int
    """Choice index within the request."""
    token_id: int
    """The sampled token id."""
    logprob: float
    """Its log-probability under the distribution it was sampled from (`logprobs_mode` processed; a greedy row's:
    the raw one) or the raw model distribution (`raw`); NaN for a token drawn under a prefix constraint."""
    top: tuple[tuple[int, float], ...]
    """The best (token id, logprob) alternatives under the same distribution, best first."""
    text_delta: str
    """Visible text settled by this token (may be empty)."""
    finish_reason: str | None = None
    """'stop' or 'length' on the choice's last token, else None."""
    stop_reason: str | int | None = None
    """The stop string or stop token id that ended the choice, else None."""
    constrained: bool = False
    """Drawn under the request's prefix constraint (`GenerationParams.continuations`): not from the policy's own
    distribution, so `logprob` is NaN (reported as null)."""


@dataclass(frozen=True)
class Failed:
    """The request cannot be completed; no more events follow."""

    message: str
    """What went wrong."""


Event = Admitted | TokenEvent | Failed


@dataclass(eq=False)
class GenerationRequest:
    """A request submitted to the scheduler; `emit` receives its events on the generation thread."""

    prompt_ids: list[int]
    """Token ids of the prompt."""
    params: GenerationParams
    """Sampling and stopping parameters."""
    emit: Callable[[Event], None]
    """Called (from the generation thread) with every event of this request."""
    cancelled: bool = False
    """Set by the caller when the client went away; its rows are dropped at the next step."""


@dataclass(eq=False)
class _Row:
    """One choice being generated."""

    request: GenerationRequest
    choice: int
    generator: torch.Generator
    text: ChoiceText
    next_token: int = -1
    tokens: list[int] = field(default_factory=list)
    """Generated token ids so far."""


@dataclass(eq=False)
class _Control:
    """A weight operation waiting for the batch to drain."""

    action: Callable[[], object]
    future: Future = field(default_factory=Future)


class GenerationScheduler:
    """Runs generation on a dedicated thread; thread-safe `submit` and `control`."""

    def __init__(self, holder: ModelHolder, max_batch_size: int = 16,
                 logprobs_mode: LogprobsMode = "processed", prefix_cache_tokens: int = 0) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}; it must be at least 1")
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode={logprobs_mode!r}; use one of {LOGPROBS_MODES}")
        self.holder = holder
        self.max_batch_size = max_batch_size
        self.logprobs_mode: LogprobsMode = logprobs_mode
        """Which distribution reported logprobs are of (engines.serving.sampling)."""
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        """Finished rows' KV, reused by prompts that extend them (0 tokens: off)."""
        self._lock = threading.Condition()
        self._pending: collections.deque[GenerationRequest] = collections.deque()
        self._controls: collections.deque[_Control] = collections.deque()
        self._rows: list[_Row] = []
        self._batch: kv_batch.KVBatch | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="generation", daemon=True)

    def start(self) -> None:
        """Starts the generation thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread; queued requests fail."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        self._thread.join(timeout=30)

    def submit(self, request: GenerationRequest) -> None:
        """Queues a request; it joins the batch at the next step boundary."""
        with self._lock:
            self._pending.append(request)
            self._lock.notify_all()

    def control(self, action: Callable[[], object]) -> Future:
        """Runs `action` on the generation thread once no request generates; the future gets its result."""
        control = _Control(action)
        with self._lock:
            self._controls.append(control)
            self._lock.notify_all()
        return control.future

    @property
    def running_rows(self) -> int:
        """Rows in the running batch (for health and tests)."""
        return len(self._rows)

    def _has_work(self) -> bool:
        return bool(self._rows or self._controls or (self._pending and not self.holder.asleep))

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._has_work():
                    self._lock.wait()
                if self._stopping:
                    break
            self._run_controls_when_drained()
            if not self._controls and not self.holder.asleep:
                self._guarded(self._admit)
            if self._rows:
                self._guarded(self._step)
        self._fail_everything("the engine is shutting down")

    def _run_controls_when_drained(self) -> None:
        while self._controls and not self._rows:
            with self._lock:
                control = self._controls.popleft()
            self.prefix_cache.clear()  # sleep, wake-up and updates change or drop the weights the KV came from
            try:
                control.future.set_result(control.action())
            except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
                control.future.set_exception(exc)

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - a failed forward fails its requests, not the engine
            logger.exception("generation step failed")
            for request in {row.request for row in self._rows}:
                request.emit(Failed(f"generation failed: {exc!r}"))
            self._rows, self._batch = [], None

    def _take_admissible(self) -> list[GenerationRequest]:
        taken: list[GenerationRequest] = []
        rows = len(self._rows)
        with self._lock:
            while self._pending:
                request = self._pending[0]
                if request.cancelled:
                    self._pending.popleft()
                    continue
                if rows and rows + request.params.n > self.max_batch_size:
                    break
                taken.append(self._pending.popleft())
                rows += request.params.n
        return taken

    def _admit(self) -> None:
        requests = self._take_admissible()
        if not requests:
            return
        for request in requests:
            request.emit(Admitted(self.holder.policy_version))
        self.prefix_cache.sync_version(self.holder.policy_version)
        leaders, followers = self._leaders(requests)
        if leaders:
            self._join(leaders, None)  # their prompts' KV is cached now: the followers reuse it
        for request in followers:  # one at a time, each looked up after the previous one's prompt was stored
            self._join([request], self.prefix_cache.lookup(request.prompt_ids))

    def _leaders(self, requests: list[GenerationRequest]) -> tuple[list[GenerationRequest], list[GenerationRequest]]:
        """Splits the requests admitted together into leaders, prefilled together first, and followers: those with a
        reusable prefix in the cache or in a leader's prompt (a group's rollouts, prompts with one system prompt),
        each prefilled after it."""
        if not self.prefix_cache.enabled:
            return requests, []
        leaders: list[GenerationRequest] = []
        followers: list[GenerationRequest] = []
        for request in requests:
            prompt = request.prompt_ids
            shared = max([self.prefix_cache.reusable_len(prompt)]
                         + [common_prefix_len(leader.prompt_ids, prompt) for leader in leaders])
            reusable = min(shared, len(prompt) - 1) >= self.prefix_cache.min_reuse_tokens
            (followers if reusable else leaders).append(request)
        return leaders, followers

    def _join(self, requests: list[GenerationRequest], hit: PrefixHit | None) -> None:
        """Prefills `requests` (together, or one request after its cached prefix) and merges their rows in."""
        new_rows = [self._new_row(request, choice)
                    for request in requests for choice in range(request.params.n)]
        try:
            prompts = [row.request.prompt_ids for row in new_rows]
            if hit is None:
                batch, logits_BV = kv_batch.prefill(self.holder.model, prompts, self.holder.pad_token_id)
            else:
                batch, logits_BV = kv_batch.prefill_after(self.holder.model, prompts[0], hit.layers)
                if len(prompts) > 1:  # n choices of one request: the same cache for each
                    batch = kv_batch.select(batch, [0] * len(prompts))
                    logits_BV = logits_BV.repeat(len(prompts), 1)
            self._keep_prompts(batch, new_rows)
            keep = self._emit_tokens(new_rows, logits_BV, [len(r.request.prompt_ids) for r in new_rows], batch)
        except Exception as exc:  # noqa: BLE001 - a failed prefill fails the joining requests only
            logger.exception("prefill failed")
            for request in requests:
                request.emit(Failed(f"prefill failed: {exc!r}"))
            return
        survivors = kv_batch.select(batch, keep)
        if survivors is not None:
            self._batch = kv_batch.merge(self._batch, survivors)
            self._rows.extend(new_rows[i] for i in keep)

    def _keep_prompts(self, batch: kv_batch.KVBatch, rows: list[_Row]) -> None:
        """Stores each new request's prompt KV as soon as it is prefilled, so that a prompt arriving while it still
        generates (its group's other rollouts) reuses it; the finished row's longer entry replaces it."""
        if self.prefix_cache.enabled:
            for b, row in enumerate(rows):
                if row.choice == 0:
                    self.prefix_cache.store(row.request.prompt_ids, kv_batch.row_layers(batch, b))

    def _keep_finished(self, batch: kv_batch.KVBatch, b: int, row: _Row) -> None:
        """Stores finished row `b`'s cache (its prompt and every generated token but the last) for later prompts."""
        if self.prefix_cache.enabled:
            self.prefix_cache.store(row.request.prompt_ids + row.tokens[:-1], kv_batch.row_layers(batch, b))

    def _new_row(self, request: GenerationRequest, choice: int) -> _Row:
        params = request.params
        decode = self.holder.tokenizer.decode
        text = ChoiceText(lambda ids: decode(ids, skip_special_tokens=True), params.stop,
                          params.include_stop_str)
        return _Row(request, choice, row_generator(params.seed, choice), text)

    def _step(self) -> None:
        live = [i for i, row in enumerate(self._rows) if not row.request.cancelled]
        if len(live) < len(self._rows):
            self._batch = kv_batch.select(self._batch, live)
            self._rows = [self._rows[i] for i in live]
            if not self._rows:
                return
        next_ids_B = torch.tensor([row.next_token for row in self._rows], dtype=torch.long)
        logits_BV = kv_batch.decode_step(self.holder.model, self._batch, next_ids_B)
        keep = self._emit_tokens(self._rows, logits_BV, self._batch.positions_B.tolist(), self._batch)
        if len(keep) < len(self._rows):
            self._batch = kv_batch.select(self._batch, keep)
            self._rows = [self._rows[i] for i in keep]

    def _emit_tokens(self, rows: list[_Row], logits_BV: torch.Tensor, lengths_B: list[int],
                     batch: kv_batch.KVBatch) -> list[int]:
        """Samples one token per row (a row under a prefix constraint among its allowed tokens, reported with a NaN
        logprob), emits it, and returns the indices of rows that continue; a finished row's cache is stored before
        its last token is emitted (the harness's next call may follow at once)."""
        allowed = [allowed_next_tokens(r.request.params.continuations, r.tokens) for r in rows]
        tokens_B, logprobs_BV = sample_step(constrain_logits_BV(logits_BV, allowed),
                                            [r.request.params.sampling for r in rows],
                                            [r.generator for r in rows], self.logprobs_mode)
        logprobs_BV = logprobs_BV.clamp_min(REPORTED_LOGPROB_FLOOR)
        chosen_B = logprobs_BV.gather(1, tokens_B[:, None])[:, 0]
        widest = max(r.request.params.top_logprobs for r in rows)
        top_values_BK, top_ids_BK = top_logprobs_BK(logprobs_BV, widest)
        keep: list[int] = []
        for b, row in enumerate(rows):
            token = int(tokens_B[b])
            k = row.request.params.top_logprobs
            top = tuple(zip(top_ids_BK[b, :k].tolist(), top_values_BK[b, :k].tolist(), strict=True))
            finish, reason = self._advance(row, token, lengths_B[b] + 1)
            if finish is not None:
                self._keep_finished(batch, b, row)
            constrained = allowed[b] is not None
            row.request.emit(TokenEvent(row.choice, token, math.nan if constrained else float(chosen_B[b]), top,
                                        row.text.take_delta(final=finish is not None), finish, reason, constrained))
            if finish is None:
                row.next_token = token
                keep.append(b)
        return keep

    def _advance(self, row: _Row, token: int, total_len: int) -> tuple[str | None, str | int | None]:
        """Records `token` in the row; returns (finish_reason, stop_reason) if the row is done."""
        params = row.request.params
        row.tokens.append(token)
        if token in self.holder.eos_token_ids and not params.ignore_eos:
            if params.include_stop_str:
                row.text.append(token)
            return "stop", None
        if token in params.stop_token_ids:
            if params.include_stop_str:
                row.text.append(token)
            return "stop", token
        stop = row.text.append(token)
        if stop is not None:
            return "stop", stop
        if len(row.tokens) >= params.max_tokens or total_len >= self.holder.max_model_len:
            return "length", None
        return None, None

    def _fail_everything(self, message: str) -> None:
        with self._lock:
            waiting = list(self._pending)
            self._pending.clear()
            controls = list(self._controls)
            self._controls.clear()
        for request in {row.request for row in self._rows} | set(waiting):
            request.emit(Failed(message))
        for control in controls:
            control.future.set_exception(RuntimeError(message))
