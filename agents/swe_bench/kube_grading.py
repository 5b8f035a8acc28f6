"""Run one grading Job (`grading_job`) through the Kubernetes API and return its pod's log.

Creates the Secret and the Job, polls the Job until it completes, fails or passes its deadline, reads the `grade`
container's log, and deletes both whatever happened. API errors and a Job that never produced a log raise
`GradingInfraError` (the rollout then fails as an infrastructure failure, not as the agent's).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.swe_bench.grading_job import GRADE_CONTAINER, build_grading_job, build_grading_secret
from controller.config import KubernetesSettings

log = logging.getLogger("harnessrl.swe_bench")
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


class GradingInfraError(RuntimeError):
    """The grading Job could not run or gave no log; the message names the Job and the cause."""


@dataclass(frozen=True)
class GradingRun:
    """What the grading Job left."""

    log: str  # the grade container's log (stdout and stderr)
    ending: str  # "complete", "failed" (the script exited non-zero) or "deadline"


class KubeGrader:
    """Grading Jobs in the settings' namespace (one blocking call per grade; called from the grading threads)."""

    def __init__(self, settings: KubernetesSettings, *, api: Any = None, poll_s: float = 2.0) -> None:
        from kubernetes import client

        from controller.runners.kubernetes import api_client

        self.settings, self.poll_s = settings, poll_s
        api = api or api_client(settings)
        self._batch, self._core = client.BatchV1Api(api), client.CoreV1Api(api)

    def run(self, instance: Mapping[str, Any], model_patch: str, image: str, name: str,
            timeout_s: float) -> GradingRun:
        """Create, wait, read the log, delete."""
        from kubernetes.client.exceptions import ApiException

        namespace = self.settings.namespace
        secret = build_grading_secret(instance, model_patch, name, namespace)
        job = build_grading_job(instance, image, name, self.settings, timeout_s)
        try:
            self._core.create_namespaced_secret(namespace, secret, _preload_content=False)
            self._batch.create_namespaced_job(namespace, job, _preload_content=False)
            ending = self._wait(name, timeout_s + 60)
            return GradingRun(self._log(name), ending)
        except ApiException as exc:
            raise GradingInfraError(f"grading Job {name} in {namespace!r}: {exc.status} {exc.reason}: "
                                    f"{exc.body}; check the controller's RBAC and the instance image") from exc
        finally:
            self._delete(self._batch.delete_namespaced_job, name, propagation_policy="Background")
            self._delete(self._core.delete_namespaced_secret, name)

    def _wait(self, name: str, wait_s: float) -> str:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            response = self._batch.read_namespaced_job(name, self.settings.namespace, _preload_content=False)
            status = json.loads(response.data).get("status") or {}
            for condition in status.get("conditions") or []:
                if condition.get("status") != "True":
                    continue
                if condition.get("type") == "Complete":
                    return "complete"
                if condition.get("type") == "Failed":
                    return "deadline" if condition.get("reason") == "DeadlineExceeded" else "failed"
            time.sleep(self.poll_s)
        raise GradingInfraError(f"grading Job {name} did not end within {wait_s:g} s (image pull? node pressure?)")

    def _log(self, name: str) -> str:
        selector = f"{JOB_NAME_LABELS[0]}={name}"
        response = self._core.list_namespaced_pod(self.settings.namespace, label_selector=selector,
                                                  _preload_content=False)
        pods = json.loads(response.data)["items"]
        if not pods:
            raise GradingInfraError(f"grading Job {name} ended without a pod to read the log of")
        pod = pods[-1]["metadata"]["name"]
        response = self._core.read_namespaced_pod_log(pod, self.settings.namespace, container=GRADE_CONTAINER,
                                                      _preload_content=False)
        return response.data.decode("utf-8", "replace")

    def _delete(self, method: Any, name: str, **kwargs: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            method(name, self.settings.namespace, _preload_content=False, **kwargs)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("deleting %s failed: %s %s", name, exc.status, exc.reason)
