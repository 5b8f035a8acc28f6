"""The runner seam: start a harness attempt, report how it ended, release what it held."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class Termination(StrEnum):
    """How an attempt ended, as far as the runner can tell (the outcome table maps it to a rollout state)."""

    EXITED = "exited"  # the harness exited on its own (any exit code)
    CRASHED = "crashed"  # the harness died from a signal it did not ask for (segfault, SIGKILL from outside)
    TIMED_OUT = "timed_out"  # the attempt ran past its deadline and was killed
    OOM_KILLED = "oom_killed"  # the harness went over its memory limit
    LIMIT_EXCEEDED = "limit_exceeded"  # the pod went over a limit of its own (ephemeral storage, its volume's size)
    START_FAILED = "start_failed"  # the harness never started (missing binary, image pull failure, bad config)
    EVICTED = "evicted"  # the node evicted the pod (pressure, preemption, disruption)
    NODE_LOST = "node_lost"  # the node or the Job vanished under the attempt
    CANCELLED = "cancelled"  # the controller cancelled the attempt (lost lease, shutdown)


class RunnerStartError(RuntimeError):
    """The runner could not start the attempt (an infrastructure failure: the rollout is retried)."""


class RunnerFullError(RuntimeError):
    """`start` was called with no free slot; call `free_slots()` first."""


@dataclass(frozen=True)
class RunSpec:
    """One harness attempt to run under the harness contract."""

    rollout_id: str  # the rollout's id
    attempt: int  # the gateway's attempt number (1 for the first claim)
    command: tuple[str, ...]  # the harness command (argv)
    base_url: str  # OPENAI_BASE_URL: the rollout's gateway URL ({gateway}/r/{id}/v1)
    api_key: str = field(repr=False)  # OPENAI_API_KEY: the rollout's own key (a credential: not in the repr)
    task: Mapping[str, Any]  # the task input written to task.json
    workdir: Path  # the prepared working directory (task.json inside) on the controller's machine
    timeout_s: float  # wall-clock limit of the attempt; killed past it
    stdout_path: Path  # where the harness's stdout is kept
    stderr_path: Path  # where the harness's stderr is kept
    extra_env: Mapping[str, str] = field(default_factory=dict)  # extra variables for the harness (never credentials)
    readonly: tuple[Path, ...] = ()  # more of the harness's own code, bound read-only (a recipe file's folder)


@dataclass(frozen=True)
class RunResult:
    """How one attempt ended."""

    rollout_id: str  # the rollout's id
    attempt: int  # the attempt number it ran as
    termination: Termination  # how it ended
    exit_code: int | None  # the harness's exit code; None when it was killed or never ran
    detail: str  # a human-readable reason (signal name, pod reason, start error)
    duration_s: float  # wall-clock seconds from start to end


class Runner(Protocol):
    """Runs harness attempts; driven by the reconcile loop from one thread."""

    def free_slots(self) -> int:
        """How many more attempts `start` accepts now."""
        ...

    def start(self, spec: RunSpec) -> None:
        """Start an attempt; raises RunnerStartError (retried as infra) or RunnerFullError."""
        ...

    def poll(self) -> list[RunResult]:
        """Attempts that ended since the last poll (enforces deadlines as a side effect)."""
        ...

    def cancel(self, rollout_id: str) -> None:
        """Stop an attempt now; it is reported by a later `poll` as CANCELLED."""
        ...

    def release(self, rollout_id: str) -> None:
        """Free what the ended attempt still holds (processes left in its group, Jobs, Secrets)."""
        ...

    def close(self) -> None:
        """Cancel and release everything (controller shutdown)."""
        ...


@runtime_checkable
class OrphanReaper(Protocol):
    """A runner whose attempts can outlive the controller that started them (Kubernetes Jobs): a restarted controller
    finds the ones labelled with its identity and stops them."""

    def reap_orphans(self, controller_id: str, held: Collection[str]) -> list[str]:
        """Stop every attempt started under `controller_id` whose rollout is not in `held`; returns their rollout ids.
        Attempts started after this call are labelled with `controller_id`."""
        ...


@runtime_checkable
class DeadlineExtender(Protocol):
    """A runner whose attempts' deadlines can move: the controller extends them by the time the gateway held calls
    during a collocated weight update, so that time does not count against a harness's limit."""

    def extend_deadline(self, rollout_id: str, extra_s: float) -> None:
        """Push the running attempt's deadline back by `extra_s` seconds (no-op for an attempt that ended)."""
        ...
