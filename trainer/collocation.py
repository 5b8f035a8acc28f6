"""One policy update on the engine's own devices: pause → drain → sleep → train → save → refit → wake → resume.

The gateway holds new calls (they wait, they are not rejected) and drains the ones in flight; the engine releases its
memory; the backend takes one step on the same devices and writes a checkpoint; the engine loads it under the new
policy version; the gateway records that version and releases the held calls. Unfinished rollouts simply continue
under the new policy. Each phase is timed: rollout time is what the loop spends waiting, the rest is measured here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engines.base import Engine
from gateway.client_roles import AdminClient
from trainer.backends.base import Backend, TrainBatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpdateResult:
    """A finished update: the backend's metrics, the checkpoint written and the phase timings."""

    metrics: Mapping[str, float]
    """The backend's train-step metrics."""
    checkpoint: Path
    """The checkpoint directory the engine now serves."""
    policy_version: int
    """The new policy version."""
    drain_s: float
    """Pausing the gateway until in-flight calls finished, plus the engine's sleep."""
    update_s: float
    """The backend's train step."""
    checkpoint_s: float
    """Writing the checkpoint."""
    weight_sync_s: float
    """Loading the checkpoint into the engine, waking it, recording the version at the gateway."""
    held_calls: int
    """Calls the gateway was holding when the update ended."""

    def timing_metrics(self) -> dict[str, float]:
        """The phase timings as metrics."""
        return {"time/drain_s": self.drain_s, "time/update_s": self.update_s,
                "time/checkpoint_s": self.checkpoint_s, "time/weight_sync_s": self.weight_sync_s,
                "gateway/held_calls_at_resume": float(self.held_calls)}


def publish_weights(engine: Engine, path: Path, version: int) -> None:
    """Loads checkpoint `path` as `version` into a sleeping engine and wakes it up.

    An engine that accepts new weights while asleep (`loads_weights_asleep`, the embedded engine: it loads them once,
    at wake-up) gets them first; vLLM must be awake to reload in place, so it wakes first.
    """
    if getattr(engine, "loads_weights_asleep", False):
        engine.update_weights(path, version)
        engine.wake_up()
    else:
        engine.wake_up()
        engine.update_weights(path, version)


def collocated_update(gateway: AdminClient, engine: Engine, backend: Backend, batch: TrainBatch,
                      checkpoint_root: Path, model_name: str, drain_timeout_s: float = 600.0) -> UpdateResult:
    """Runs one update collocated with the engine (see the module docstring); the gateway is resumed on any error."""
    started = time.perf_counter()
    gateway.pause(timeout_s=drain_timeout_s)
    asleep = False
    try:
        engine.sleep()
        asleep = True
        slept = time.perf_counter()
        metrics = backend.train_step(batch)
        trained = time.perf_counter()
        path, version = backend.save_checkpoint(checkpoint_root)
        saved = time.perf_counter()
        publish_weights(engine, path, version)
        asleep = False
        gateway.set_model_version(model_name, version)
        synced = time.perf_counter()
    finally:
        if asleep:
            _wake_quietly(engine)
        resumed = gateway.resume()
    return UpdateResult(metrics, path, version, slept - started, trained - slept, saved - trained, synced - saved,
                        resumed.held)


def _wake_quietly(engine: Engine) -> None:
    """Wakes the engine after a failed update so the old weights keep serving (the failure itself propagates)."""
    try:
        engine.wake_up()
    except Exception:  # noqa: BLE001 - the update's own error is the one to report
        log.exception("waking the engine after a failed update failed too")
