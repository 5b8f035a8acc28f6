"""Limits a process may actually set: an unprivileged caller cannot raise a hard limit it already has."""

from __future__ import annotations

import dataclasses
import os
import resource

from sandbox.spec import Limits

FIELDS = {"processes": resource.RLIMIT_NPROC, "memory_bytes": resource.RLIMIT_AS, "cpu_s": resource.RLIMIT_CPU,
          "file_bytes": resource.RLIMIT_FSIZE, "open_files": resource.RLIMIT_NOFILE}


def within_current_limits(limits: Limits) -> Limits:
    """`limits`, each lowered to this process's hard limit when it is not root (a sandbox in a sandbox)."""
    if os.geteuid() == 0:
        return limits
    lowered = {}
    for name, which in FIELDS.items():
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY and getattr(limits, name) > hard:
            lowered[name] = hard
    return dataclasses.replace(limits, **lowered)
