"""Choosing the upstream endpoint of a call: by model name, then a sticky rendezvous hash of the rollout id.

Rendezvous hashing keeps a rollout on the same engine (prefix-cache reuse) and moves only the rollouts of an
endpoint that disappears.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from gateway.errors import NotFound
from gateway.records import ModelRecord


class Router:
    """An in-memory view of the registered endpoints."""

    def __init__(self, models: Iterable[ModelRecord] = ()) -> None:
        self._by_name: dict[str, list[ModelRecord]] = {}
        self.load(models)

    def load(self, models: Iterable[ModelRecord]) -> None:
        """Replace the view."""
        by_name: dict[str, list[ModelRecord]] = {}
        for model in models:
            by_name.setdefault(model.name, []).append(model)
        self._by_name = by_name

    def names(self) -> list[str]:
        """Registered model names."""
        return sorted(self._by_name)

    def version(self, name: str) -> int | None:
        """The registered policy version of a model."""
        endpoints = self._by_name.get(name)
        return max(e.version for e in endpoints) if endpoints else None

    def pick(self, model: str | None, rollout_id: str) -> ModelRecord:
        """The endpoint for a call: the model asked for, or the only registered model when the name is unknown."""
        endpoints = self._by_name.get(model or "")
        if endpoints is None:
            if len(self._by_name) != 1:
                known = ", ".join(self.names()) or "none registered"
                raise NotFound(f"model {model!r} is not served here (models: {known}); register it with "
                               "POST /v1/admin/models", param="model", code="model_not_found")
            endpoints = next(iter(self._by_name.values()))
        return max(endpoints, key=lambda e: _score(e.base_url, rollout_id))


def _score(base_url: str, rollout_id: str) -> bytes:
    return hashlib.blake2b(f"{base_url}|{rollout_id}".encode(), digest_size=8).digest()
