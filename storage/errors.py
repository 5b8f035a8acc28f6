"""The errors of the storage layer; each message names the key, URI or folder and the fix."""

from __future__ import annotations


class StoreError(ValueError):
    """A store operation that cannot be done, or a stored folder that cannot be used."""


class NotFoundError(StoreError):
    """Nothing complete exists at a URI."""
