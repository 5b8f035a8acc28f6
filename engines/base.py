"""The `Engine` seam: what the trainer needs from an inference engine (embedded CPU server or vLLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Engine(Protocol):
    """An OpenAI-compatible inference server whose weights the trainer can swap."""

    @property
    def base_url(self) -> str:
        """Server root such as http://127.0.0.1:8001 (the OpenAI base URL is base_url + '/v1')."""
        ...

    def start(self) -> None:
        """Starts the server and returns once it answers /health."""
        ...

    def sleep(self) -> None:
        """Waits for in-flight generation, then releases the weights' memory; new requests wait."""
        ...

    def wake_up(self) -> None:
        """Reloads the weights and serves the waiting requests."""
        ...

    def update_weights(self, path: Path | str, version: int) -> None:
        """Loads the HF checkpoint at `path` between batches and sets the policy version."""
        ...

    def stop(self) -> None:
        """Stops the server and frees its resources."""
        ...
