"""Pure mapping of Kubernetes Job and Pod status (plain JSON dicts) to how an attempt ended.

Job conditions: Complete -> exited 0; Failed with DeadlineExceeded -> timed out; other Failed -> read the pod.
Pod reasons: Evicted past the pod's own ephemeral-storage or volume limit -> limit exceeded (the agent's doing);
other evictions, or a DisruptionTarget condition (preemption, drain) -> evicted; NodeLost -> node lost;
OOMKilled -> oom killed; a non-zero exit -> exited with that code (128+n with reason Error -> crashed by signal n);
an init container that failed, a container stuck on an image or config error, or a harness command the agent
image cannot start (the wrapper's termination message) -> start failed.
"""

from __future__ import annotations

import signal
from typing import Any

from controller.pod_transfer import NOT_STARTED_MARK
from controller.runners.base import Termination

START_ERRORS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
                          "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
NODE_LOST_REASONS = frozenset({"NodeLost", "Terminated", "NodeShutdown", "UnexpectedAdmissionError"})
# The kubelet's eviction messages for a pod past a limit of its own (pkg/kubelet/eviction): the agent's doing, not the
# node's; an eviction for node pressure or a disruption stays the infrastructure's.
# Under node pressure the kubelet evicts the pods using most above their requests, and names a container that did
# ("... has larger consumption of inodes"): that pod caused the pressure (millions of files, a fork bomb).
OWN_LIMIT_EVICTIONS = ("exceeds the total limit of containers", "exceeded its local ephemeral storage limit",
                       "Usage of EmptyDir volume", "has larger consumption of")
Ending = tuple[Termination, int | None, str]  # (termination, exit code, detail)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def job_ending(job: dict[str, Any], pods: list[dict[str, Any]]) -> Ending | None:
    """How a Job's attempt ended, or None while it still runs (pods: the Job's pods, newest last)."""
    status = job.get("status") or {}
    if _condition(status, "Complete") or (status.get("succeeded") or 0) > 0:
        return Termination.EXITED, 0, "Job complete"
    failed = _condition(status, "Failed")
    if failed is None:
        return None
    if failed.get("reason") == "DeadlineExceeded":
        return Termination.TIMED_OUT, None, f"Job DeadlineExceeded: {failed.get('message', '')}".strip()
    for pod in reversed(pods):
        ending = pod_ending(pod)
        if ending is not None:
            return ending
    return Termination.NODE_LOST, None, f"Job failed ({failed.get('reason')}) with no pod left to explain it"


def pod_ending(pod: dict[str, Any]) -> Ending | None:
    """Why a pod's attempt ended (or cannot start), or None when the pod gives no reason (yet)."""
    status = pod.get("status") or {}
    reason = status.get("reason")
    message = status.get("message") or ""
    if reason == "Evicted" and any(mark in message for mark in OWN_LIMIT_EVICTIONS):
        return Termination.LIMIT_EXCEEDED, None, f"pod evicted past its own limit: {message}"
    if reason == "Evicted" or _condition(status, "DisruptionTarget"):
        return Termination.EVICTED, None, f"pod evicted: {status.get('message') or reason or 'DisruptionTarget'}"
    if reason in NODE_LOST_REASONS:
        return Termination.NODE_LOST, None, f"pod {reason}: {status.get('message', '')}".strip()
    for init in status.get("initContainerStatuses") or []:
        terminated = (init.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return Termination.START_FAILED, None, f"init container {init.get('name')} failed: {terminated}"
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        ending = _container_ending(container)
        if ending is not None:
            return ending
    return None


def _container_ending(container: dict[str, Any]) -> Ending | None:
    state = container.get("state") or {}
    waiting = state.get("waiting")
    if waiting and waiting.get("reason") in START_ERRORS:
        return Termination.START_FAILED, None, f"{waiting['reason']}: {waiting.get('message', '')}".strip()
    terminated = state.get("terminated")
    if not terminated:
        return None
    code = terminated.get("exitCode")
    if (terminated.get("message") or "").startswith(NOT_STARTED_MARK):
        return Termination.START_FAILED, None, terminated["message"]
    if terminated.get("reason") == "OOMKilled":
        return Termination.OOM_KILLED, None, f"OOMKilled (exit {code})"
    if code and code > 128 and terminated.get("reason") == "Error" and code - 128 in signal.valid_signals():
        return Termination.CRASHED, None, f"killed by signal {signal.Signals(code - 128).name}"
    if code:
        return Termination.EXITED, code, f"exited with code {code} ({terminated.get('reason')})"
    return None
