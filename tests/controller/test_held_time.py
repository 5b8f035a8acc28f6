"""Time the gateway held calls (a collocated weight update) does not count against a harness's time limit.

The gateway counts its paused seconds; each reconcile tick the controller extends every running attempt's deadline by
their growth (LocalRunner: the monotonic deadline; KubernetesRunner: the Job's activeDeadlineSeconds)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from controller.config import ControllerConfig
from controller.reconcile import Reconciler, _Active
from controller.runners.base import Termination
from controller.runners.local import LocalRunner
from controller.runners.manifests import job_name
from gateway.client import GatewayAPIError
from gateway.pause import PauseGate
from tests.controller.test_kubernetes_runner import kube, runner, spec  # noqa: F401 - the fake cluster fixture
from tests.controller.test_local_runner import spec as local_spec
from tests.controller.test_local_runner import wait_results


def test_the_pause_gate_counts_its_paused_seconds():
    async def main() -> None:
        gate = PauseGate(hold_timeout_s=5.0)
        assert gate.paused_s == 0.0
        await gate.pause(drain_timeout_s=1.0)
        await asyncio.sleep(0.2)
        assert 0.15 < gate.paused_s < 1.0  # the current pause counts while it lasts
        gate.resume()
        first = gate.paused_s
        await asyncio.sleep(0.1)
        assert gate.paused_s == first  # not while running
        await gate.pause(drain_timeout_s=1.0)
        await gate.pause(drain_timeout_s=1.0)  # a second pause call does not restart the clock
        await asyncio.sleep(0.1)
        gate.resume()
        assert first + 0.08 < gate.paused_s < first + 1.0

    asyncio.run(main())


@dataclass
class ScriptedAdmin:
    """The admin client's state(): the gateway's paused seconds, one value per tick (an error where given)."""

    paused_s: list[float | Exception]

    def state(self):
        value = self.paused_s.pop(0)
        if isinstance(value, Exception):
            raise value
        return SimpleNamespace(paused_s=value)


@dataclass
class ExtendingRunner:
    """A runner with attempts that never end; records deadline extensions."""

    extended: list[tuple[str, float]] = field(default_factory=list)

    def free_slots(self) -> int:
        return 0

    def poll(self) -> list:
        return []

    def extend_deadline(self, rollout_id: str, extra_s: float) -> None:
        self.extended.append((rollout_id, extra_s))

    def close(self) -> None:
        pass


def test_each_tick_extends_running_attempts_by_the_growth_of_the_gateways_paused_time(tmp_path):
    admin = ScriptedAdmin([10.0, 10.0, 12.5, GatewayAPIError(503, "down", None), 14.0, 1.0, 3.0])
    runner = ExtendingRunner()
    reconciler = Reconciler(ControllerConfig(work_dir=tmp_path), admin, admin, runner)
    reconciler._orphans_reaped = True
    for rollout_id in ("a", "b"):
        attempt = SimpleNamespace(rollout=SimpleNamespace(id=rollout_id))
        reconciler._active[rollout_id] = _Active(attempt, time.monotonic() + 3600)
    extended = []
    for _ in range(7):
        reconciler.tick()
        extended.append(sorted(runner.extended))
        runner.extended.clear()
    # the first read is the baseline; an unreadable state skips a tick (its growth comes with the next read); a
    # restarted gateway (the counter went down) starts a new baseline
    assert extended == [[], [], [("a", 2.5), ("b", 2.5)], [], [("a", 1.5), ("b", 1.5)], [], [("a", 2.0), ("b", 2.0)]]
    reconciler._pool.shutdown()


@pytest.mark.slow
def test_a_local_attempt_whose_deadline_was_extended_finishes_instead_of_timing_out(tmp_path):
    runner = LocalRunner(1, kill_grace_s=0.2)
    runner.start(local_spec(tmp_path, "import time; time.sleep(1.0)", timeout_s=0.5))  # runs past 0.5 s
    runner.extend_deadline("r1", 5.0)
    runner.extend_deadline("unknown", 5.0)  # an attempt that already ended: nothing to do
    [result] = wait_results(runner, 1)
    runner.release("r1")
    runner.close()
    assert result.termination == Termination.EXITED and result.exit_code == 0


def test_a_kubernetes_attempt_gets_its_jobs_deadline_raised(kube, tmp_path):  # noqa: F811 - the fixture
    run = runner(kube)
    run.start(spec(tmp_path))
    run.extend_deadline("r1", 2.2)
    run.extend_deadline("r1", 3.0)
    run.extend_deadline("other", 3.0)
    name = job_name("r1", 1)
    assert kube.objects["jobs"][name]["spec"]["activeDeadlineSeconds"] == 66  # ceil(60 + 5.2)
    assert [(kind, job) for kind, job, _, _ in kube.patches] == [("jobs", name), ("jobs", name)]
    kube.fail_next[("PATCH", "jobs")] = 500
    run.extend_deadline("r1", 1.0)  # logged, not raised; the next extension patches the whole total
    run.extend_deadline("r1", 1.0)
    assert kube.objects["jobs"][name]["spec"]["activeDeadlineSeconds"] == 68
    run.close()


def test_both_runners_are_deadline_extenders():
    from controller.runners.base import DeadlineExtender
    from controller.runners.kubernetes import KubernetesRunner

    assert issubclass(LocalRunner, DeadlineExtender) and issubclass(KubernetesRunner, DeadlineExtender)
