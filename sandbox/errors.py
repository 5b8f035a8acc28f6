"""SandboxError: the sandbox cannot be built here; its message names the reason and the fix."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox cannot be built (no bwrap, no namespaces, unreadable paths, ...): never run unsandboxed instead."""
