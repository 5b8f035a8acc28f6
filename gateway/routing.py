"""Choosing the upstream endpoint of a call: by model name (exact, then an alias pattern, then the default model),
then a sticky rendezvous hash of the rollout id; and telling a harness's side calls apart.

Rendezvous hashing keeps a rollout on the same engine (prefix-cache reuse) and moves only the rollouts of an
endpoint that disappears. Patterns are shell globs (`fnmatch`: `*`, `?`, `[...]`) matched case-insensitively.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from gateway.errors import NotFound
from gateway.records import ModelRecord

SIDE_KINDS = frozenset({"count_tokens"})
"""Call kinds that are always side calls (they sample nothing the policy is trained on)."""


def matches(pattern: str, name: str) -> bool:
    """True when the glob `pattern` matches `name`, ignoring case."""
    return fnmatchcase(name.lower(), pattern.lower())


def is_side_call(kind: str, model: str, side_models: Sequence[str]) -> bool:
    """A harness's side call: a kind in `SIDE_KINDS` (a token count), or a model name (as the harness sent it) that
    matches one of the `side_models` patterns (e.g. `claude-*haiku*`: Claude Code's small-model calls for titles)."""
    return kind in SIDE_KINDS or any(matches(pattern, model) for pattern in side_models)


class Router:
    """An in-memory view of the registered endpoints, with the gateway config's aliases and default model.

    A name resolves to: the registered model of that exact name; else the target of the first `aliases` pattern it
    matches (in the order given); else `default_model`; else, when exactly one model is registered, that one.
    """

    def __init__(self, models: Iterable[ModelRecord] = (), *, aliases: Mapping[str, str] | None = None,
                 default_model: str | None = None) -> None:
        self._by_name: dict[str, list[ModelRecord]] = {}
        self._aliases = dict(aliases or {})
        self._default_model = default_model
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

    def resolve(self, model: str | None) -> str:
        """The registered model name a call asking for `model` goes to; NotFound (404 `model_not_found`) naming the
        registered models and the config keys when there is none."""
        asked = model or ""
        if asked in self._by_name:
            return asked
        for pattern, target in self._aliases.items():
            if matches(pattern, asked):
                return self._registered(target, f"model {asked!r} matches the alias {pattern!r} -> {target!r}, but")
        if self._default_model is not None:
            return self._registered(self._default_model, f"model {asked!r} is unknown and the default_model is "
                                    f"{self._default_model!r}, but")
        if len(self._by_name) == 1:
            return next(iter(self._by_name))
        raise NotFound(f"model {asked!r} is not served here (models: {self._known()}); register it with "
                       "POST /v1/admin/models, or map it to a registered model with the gateway config's "
                       "model_aliases (glob -> model) or default_model", param="model", code="model_not_found")

    def pick(self, model: str | None, rollout_id: str) -> ModelRecord:
        """The endpoint for a call: the model `resolve` finds, then the rollout's sticky endpoint of it."""
        endpoints = self._by_name[self.resolve(model)]
        return max(endpoints, key=lambda e: _score(e.base_url, rollout_id))

    def _registered(self, target: str, why: str) -> str:
        if target not in self._by_name:
            raise NotFound(f"{why} {target!r} is not registered (models: {self._known()}); register it with "
                           "POST /v1/admin/models or fix the gateway config", param="model", code="model_not_found")
        return target

    def _known(self) -> str:
        return ", ".join(self.names()) or "none registered"


def _score(base_url: str, rollout_id: str) -> bytes:
    return hashlib.blake2b(f"{base_url}|{rollout_id}".encode(), digest_size=8).digest()
