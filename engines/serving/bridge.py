"""Bridge from the generation thread to the event loop: submit, await admission, iterate token events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engines.serving.scheduler import (
    Admitted,
    Event,
    Failed,
    GenerationParams,
    GenerationRequest,
    GenerationScheduler,
    TokenEvent,
)


class GenerationFailed(RuntimeError):
    """The engine could not finish the request (the message says why)."""


class PromptGeneration:
    """One API request: one scheduler request per prompt; choice index = prompt index * n + choice."""

    def __init__(self, scheduler: GenerationScheduler, prompts_ids: list[list[int]],
                 params: GenerationParams) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        self._n = params.n
        self._open_choices = len(prompts_ids) * params.n
        self._early: list[tuple[int, Event]] = []
        self._requests = [GenerationRequest(ids, params, self._emitter(p))
                          for p, ids in enumerate(prompts_ids)]
        self.policy_version: int | None = None
        """Version that produces the response (known once `admitted` returned)."""
        for request in self._requests:
            scheduler.submit(request)

    def _emitter(self, prompt_index: int):
        def emit(event: Event) -> None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (prompt_index, event))
        return emit

    async def admitted(self) -> int:
        """Waits until generation started (the engine may be asleep); returns the policy version."""
        while self.policy_version is None:
            prompt_index, event = await self._queue.get()
            self._handle_control(event)
            if isinstance(event, TokenEvent):
                self._early.append((prompt_index, event))
        return self.policy_version

    def _handle_control(self, event: Event) -> None:
        if isinstance(event, Failed):
            raise GenerationFailed(event.message)
        if isinstance(event, Admitted) and self.policy_version is None:
            self.policy_version = event.policy_version

    async def events(self) -> AsyncIterator[tuple[int, TokenEvent]]:
        """Token events with their global choice index, until every choice finished."""
        while self._open_choices:
            prompt_index, event = self._early.pop(0) if self._early else await self._queue.get()
            self._handle_control(event)
            if isinstance(event, TokenEvent):
                if event.finish_reason is not None:
                    self._open_choices -= 1
                yield prompt_index * self._n + event.choice, event

    def cancel(self) -> None:
        """Tells the scheduler to drop whatever is still queued or generating."""
        for request in self._requests:
            request.cancelled = True
