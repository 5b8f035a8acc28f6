"""The reconcile loop: claim queued rollouts up to free capacity, start them, renew leases, report ended attempts.

One thread drives the runner; grading and reporting run on a small thread pool so that a slow grader does not stop
lease renewals. Claims are atomic in the gateway, so several controllers can share one gateway without a rollout
being started twice. A lost lease (another controller requeued or took the rollout) cancels the local attempt
without reporting it. The rollout's key is recovered by re-posting its spec (creation is idempotent).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from controller.attempt import Attempt, prepare_attempt, recipe_name
from controller.config import ControllerConfig
from controller.outcomes import Outcome
from controller.recipe import Recipe
from controller.recipes import get_recipe
from controller.report import report_attempt
from controller.runners.base import DeadlineExtender, OrphanReaper, Runner, RunResult, Termination
from gateway.client import GatewayAPIError
from gateway.client_roles import LeaseClient
from gateway.records import ClaimedRollout, EventKind, FailureKind, InfraReason, Rollout, RolloutState

log = logging.getLogger("harnessrl.controller")
GATEWAY_ERRORS = (httpx.HTTPError, GatewayAPIError)


@dataclass
class ReconcileStats:
    """Counters of one controller, for logs and tests."""

    claimed: int = 0  # rollouts claimed
    started: int = 0  # attempts the runner accepted
    reported: dict[str, int] = field(default_factory=dict)  # "succeeded" / "failed:agent" / "queued"... -> count
    lost: int = 0  # attempts dropped because the lease was lost


@dataclass
class _Active:
    attempt: Attempt
    renewed_s: float  # monotonic time of the last lease renewal
    lost: bool = False  # the lease was lost: do not report


class Reconciler:
    """Drives one Runner from one gateway; `tick()` is one pass, `run()` loops until stopped (or idle)."""

    def __init__(self, config: ControllerConfig, admin: LeaseClient, grader: LeaseClient, runner: Runner,
                 recipes: Callable[[str], Recipe] = get_recipe) -> None:
        self.config, self.admin, self.grader, self.runner = config, admin, grader, runner
        self._recipes = recipes
        self._active: dict[str, _Active] = {}  # attempts in the runner
        self._reporting: dict[str, tuple[_Active, Future]] = {}  # ended attempts being graded and reported
        self._pool = ThreadPoolExecutor(config.grade_workers, thread_name_prefix="harnessrl-report")
        self.stats = ReconcileStats()
        self._orphans_reaped = False
        self._paused_s: float | None = None  # the gateway's paused seconds when last read

    def idle(self) -> bool:
        """True when no attempt is running or being reported."""
        return not self._active and not self._reporting

    def tick(self) -> int:
        """One reconcile pass; returns how many rollouts were claimed."""
        if not self._orphans_reaped:
            self._reap_orphans()
        self._extend_for_held_time()
        self._collect_ended()
        self._collect_reports()
        self._renew_leases()
        return self._claim_and_start()

    def run(self, stop: threading.Event | None = None, *, until_idle: bool = False) -> ReconcileStats:
        """Tick every poll_interval_s until `stop` is set (or, with until_idle, nothing is left to claim or run)."""
        stop = stop or threading.Event()
        try:
            while not stop.is_set():
                claimed = self.tick()
                if until_idle and claimed == 0 and self.idle():
                    break
                stop.wait(self.config.poll_interval_s)
        finally:
            self.shutdown()
        return self.stats

    def _reap_orphans(self) -> None:
        """Once, before the first claim: stop what an earlier life of this controller left running (its leases
        expire in the gateway, which requeues those rollouts)."""
        if not isinstance(self.runner, OrphanReaper):
            self._orphans_reaped = True
            return
        try:
            reaped = self.runner.reap_orphans(self.config.controller_id, set(self._active))
        except Exception as exc:  # noqa: BLE001 - an unreachable cluster: look again next tick
            log.warning("could not look for orphaned attempts of %s, retrying next tick: %s",
                        self.config.controller_id, exc)
            return
        self._orphans_reaped = True
        if reaped:
            log.warning("stopped %d attempts left by an earlier life of %s: %s", len(reaped),
                        self.config.controller_id, ", ".join(reaped))

    def _claim_and_start(self) -> int:
        free = self.runner.free_slots()
        if free <= 0:
            return 0
        try:
            claimed = self.admin.claim(self.config.controller_id, limit=free, lease_s=self.config.lease_s)
        except GATEWAY_ERRORS as exc:
            log.warning("claim failed (gateway unreachable?), retrying next tick: %s", exc)
            return 0
        self.stats.claimed += len(claimed)
        for rollout in claimed:
            self._start(rollout)
        return len(claimed)

    def _start(self, rollout: ClaimedRollout) -> None:
        try:
            recipe = self._recipes(recipe_name(rollout, self.config.recipe))
        except (KeyError, ImportError) as exc:
            self._fail_now(rollout, f"cannot run rollout {rollout.id!r}: {exc}", InfraReason.RECIPE_UNAVAILABLE)
            return
        active = None
        try:
            attempt = prepare_attempt(self.config, rollout, recipe)
            active = _Active(attempt, time.monotonic())
            self.admin.post_event(rollout.id, EventKind.LOG, _log_payload(attempt))
            self.runner.start(attempt.spec)
        except Exception as exc:  # noqa: BLE001 - whatever stops a start is an infra failure of this attempt
            log.warning("rollout %s attempt %s did not start: %s", rollout.id, rollout.attempt, exc)
            if active is None:
                self._fail_unprepared(rollout, recipe, exc)
                return
            result = RunResult(rollout.id, rollout.attempt, Termination.START_FAILED, None,
                               f"{type(exc).__name__}: {exc}", 0.0)
            self._submit_report(active, result)
            return
        self.stats.started += 1
        self._active[rollout.id] = active

    def _fail_unprepared(self, rollout: Rollout, recipe: Recipe, exc: Exception) -> None:
        """A failure before the attempt existed (workdir layout, gateway error): requeue it or fail it as infra."""
        error = f"attempt {rollout.attempt} of {rollout.id!r} could not be prepared: {type(exc).__name__}: {exc}"
        if rollout.attempt >= rollout.max_attempts:
            self._fail_now(rollout, f"{error}; all {rollout.max_attempts} attempts used", InfraReason.START_FAILED)
            return
        try:
            self.admin.set_state(rollout.id, RolloutState.QUEUED, error=f"{error}; requeued", attempt=rollout.attempt,
                                 controller_id=self.config.controller_id, reason=InfraReason.START_FAILED)
            self._count("queued")
        except GATEWAY_ERRORS as gateway_exc:
            log.warning("could not requeue rollout %s (its lease will expire and requeue it): %s",
                        rollout.id, gateway_exc)

    def _fail_now(self, rollout: Rollout, error: str, reason: InfraReason) -> None:
        """Fail a rollout that no retry can fix (unknown recipe, attempts spent) as infra, for `reason`."""
        log.error("%s", error)
        try:
            self.admin.set_state(rollout.id, RolloutState.FAILED, FailureKind.INFRA, error, attempt=rollout.attempt,
                                 controller_id=self.config.controller_id, reason=reason)
            self._count("failed:infra")
        except GATEWAY_ERRORS as exc:
            log.warning("could not fail rollout %s (its lease will expire): %s", rollout.id, exc)

    def _collect_ended(self) -> None:
        for result in self.runner.poll():
            active = self._active.pop(result.rollout_id, None)
            if active is None:
                log.error("runner reported %s, which this controller did not start", result.rollout_id)
                continue
            if active.lost:
                self.stats.lost += 1
                self._cleanup(active)
                continue
            self._submit_report(active, result)

    def _submit_report(self, active: _Active, result: RunResult) -> None:
        future = self._pool.submit(report_attempt, active.attempt, result, self.admin, self.grader,
                                   self.config.controller_id, self.config.lease_s)
        self._reporting[active.attempt.rollout.id] = (active, future)

    def _collect_reports(self) -> None:
        for rollout_id, (active, future) in list(self._reporting.items()):
            if not future.done():
                continue
            del self._reporting[rollout_id]
            try:
                outcome: Outcome | None = future.result()
            except Exception:  # noqa: BLE001 - the loop must survive; the lease expiry requeues the rollout
                log.exception("reporting rollout %s failed; its lease will expire and the gateway requeues it",
                              rollout_id)
                outcome = None
            if outcome is not None:
                kind = f":{outcome.failure_kind}" if outcome.failure_kind else ""
                self._count(f"{outcome.state}{kind}")
            self._cleanup(active)

    def _cleanup(self, active: _Active) -> None:
        self.runner.release(active.attempt.rollout.id)
        if not self.config.keep_workdirs:
            shutil.rmtree(active.attempt.spec.workdir, ignore_errors=True)

    def _renew_leases(self) -> None:
        now = time.monotonic()
        held = [*self._active.values(), *(active for active, _ in self._reporting.values())]
        for active in held:
            if active.lost or now - active.renewed_s < self.config.renew_every_s:
                continue
            rollout_id = active.attempt.rollout.id
            try:
                self.admin.renew_lease(rollout_id, self.config.controller_id, self.config.lease_s)
                active.renewed_s = now
            except GatewayAPIError as exc:
                if exc.status != 409:
                    log.warning("renewing the lease of %s failed, retrying next tick: %s", rollout_id, exc)
                    continue
                log.warning("lost the lease of %s; stopping its attempt: %s", rollout_id, exc)
                active.lost = True
                self.runner.cancel(rollout_id)
            except httpx.HTTPError as exc:
                log.warning("renewing the lease of %s failed (gateway unreachable?): %s", rollout_id, exc)

    def _extend_for_held_time(self) -> None:
        """Extends the running attempts' deadlines by the time the gateway was paused since the last tick (their
        calls were held during a collocated weight update: not the harness's time)."""
        if not isinstance(self.runner, DeadlineExtender):
            return
        try:
            paused_s = self.admin.state().paused_s
        except GATEWAY_ERRORS as exc:
            log.warning("could not read the gateway's paused time, retrying next tick: %s", exc)
            return
        held_s = paused_s - self._paused_s if self._paused_s is not None and paused_s > self._paused_s else 0.0
        self._paused_s = paused_s
        if held_s > 0:
            for rollout_id in self._active:
                self.runner.extend_deadline(rollout_id, held_s)

    def _count(self, key: str) -> None:
        self.stats.reported[key] = self.stats.reported.get(key, 0) + 1

    def shutdown(self, wait_s: float | None = None) -> None:
        """Cancel running attempts, report them (infra: requeued), wait for reports, release the runner."""
        for rollout_id in list(self._active):
            self.runner.cancel(rollout_id)
        deadline = time.monotonic() + (wait_s if wait_s is not None else self.config.kill_grace_s + 10)
        while (self._active or self._reporting) and time.monotonic() < deadline:
            self._collect_ended()
            self._collect_reports()
            time.sleep(0.05)
        self._pool.shutdown(wait=True)
        self._collect_reports()
        self.runner.close()


def _log_payload(attempt: Attempt) -> dict[str, str]:
    spec = attempt.spec
    return {"path": str(spec.stdout_path.parent), "stdout": str(spec.stdout_path), "stderr": str(spec.stderr_path),
            "attempt": str(spec.attempt)}
