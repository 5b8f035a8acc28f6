"""Run one grading Job (built by `grading_job` or `recipes.swe_bench.grading_job`) through the Kubernetes API and
return its pod's log: shared by the `swe` and `swe_bench` recipes.

Creates the Secret and the Job, polls the Job and its pods until it completes, fails or passes its deadline (read
by `controller.runners.k8s_status`, as the agent runner reads its Jobs), reads the `grade` container's log, and
deletes both whatever happened. API errors, a pod that cannot start (image pull or config error, for longer than
`image_pull_grace_s`), an evicted pod, a lost node and a Job that never produced a log raise `GradingInfraError`
(the rollout then fails as an infrastructure failure, not as the agent's).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from controller.config import KubernetesSettings
from controller.recipe import GraderInfraError
from controller.runners.base import Termination
from controller.runners.k8s_status import Ending, job_ending
from controller.runners.kubernetes import JOB_NAME_LABELS, PodTrouble, api_client, delete_if_present
from controller.runners.manifests import COMPONENT_LABEL, PART_OF, PART_OF_LABEL
from recipes.swe.grading_job import GRADE_CONTAINER, GRADER_COMPONENT

GRADER_SELECTOR = f"{PART_OF_LABEL}={PART_OF},{COMPONENT_LABEL}={GRADER_COMPONENT}"
OUTCOMES = {Termination.TIMED_OUT: "deadline", Termination.EXITED: "failed", Termination.OOM_KILLED: "failed",
            Termination.CRASHED: "failed"}  # how a Job that ran ended; any other ending is the cluster's failure


class GradingInfraError(GraderInfraError):
    """The grading Job could not run or gave no log; the message names the Job and the cause (the grader's own
    infrastructure: the rollout fails as infra)."""


@dataclass(frozen=True)
class GradingRun:
    """What the grading Job left."""

    log: str  # the grade container's log (stdout and stderr)
    ending: str  # "complete", "failed" (the script exited non-zero) or "deadline"


class KubeJobRunner:
    """Grading Jobs in the settings' namespace (one blocking call per grade; called from the grading threads)."""

    def __init__(self, settings: KubernetesSettings, *, api: Any = None, poll_s: float = 2.0) -> None:
        from kubernetes import client

        self.settings, self.poll_s = settings, poll_s
        api = api or api_client(settings)
        self._batch, self._core = client.BatchV1Api(api), client.CoreV1Api(api)

    def run_job(self, secret: dict[str, Any], job: dict[str, Any], image: str, timeout_s: float) -> GradingRun:
        """Create the Secret and the Job (both named as the Job), wait, read the log, delete both."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = self.settings.namespace, job["metadata"]["name"]
        try:
            self._core.create_namespaced_secret(namespace, secret, _preload_content=False)
            self._batch.create_namespaced_job(namespace, job, _preload_content=False)
            ending = self._wait(name, image, timeout_s + 60)
            return GradingRun(self._log(name), ending)
        except ApiException as exc:
            raise GradingInfraError(f"grading Job {name} in {namespace!r}: {exc.status} {exc.reason}: "
                                    f"{exc.body}; check the controller's RBAC and the instance image") from exc
        finally:
            delete_if_present(self._batch.delete_namespaced_job, name, namespace, propagation_policy="Background")
            delete_if_present(self._core.delete_namespaced_secret, name, namespace)

    def _wait(self, name: str, image: str, wait_s: float) -> str:
        """"complete", "failed" or "deadline" once the Job ends; GradingInfraError when the cluster failed it."""
        deadline = time.monotonic() + wait_s
        trouble = PodTrouble(self.settings.image_pull_grace_s)
        while time.monotonic() < deadline:
            response = self._batch.read_namespaced_job(name, self.settings.namespace, _preload_content=False)
            pods = self._pods(name)
            ending = job_ending(json.loads(response.data), pods) or trouble.ending(pods, time.monotonic())
            if ending is not None:
                return _outcome(name, image, ending)
            time.sleep(self.poll_s)
        raise GradingInfraError(f"grading Job {name} (image {image}) did not end within {wait_s:g} s; check the "
                                "cluster's capacity (kubectl describe job)")

    def _pods(self, name: str) -> list[dict[str, Any]]:
        """The Job's pods, oldest first (either Job-name label: older clusters set only `job-name`)."""
        response = self._core.list_namespaced_pod(self.settings.namespace, label_selector=GRADER_SELECTOR,
                                                  _preload_content=False)
        pods = [pod for pod in json.loads(response.data)["items"]
                if name in {(pod["metadata"].get("labels") or {}).get(key) for key in JOB_NAME_LABELS}]
        return sorted(pods, key=lambda pod: pod["metadata"].get("creationTimestamp") or "")

    def _log(self, name: str) -> str:
        pods = self._pods(name)
        if not pods:
            raise GradingInfraError(f"grading Job {name} ended without a pod to read the log of")
        pod = pods[-1]["metadata"]["name"]
        response = self._core.read_namespaced_pod_log(pod, self.settings.namespace, container=GRADE_CONTAINER,
                                                      _preload_content=False)
        return response.data.decode("utf-8", "replace")


def _outcome(name: str, image: str, ending: Ending) -> str:
    """The GradingRun ending of a Job that ran; GradingInfraError naming the image and the reason otherwise."""
    termination, exit_code, detail = ending
    if termination == Termination.EXITED and exit_code == 0:
        return "complete"
    if termination in OUTCOMES:
        return OUTCOMES[termination]
    if termination == Termination.START_FAILED:
        raise GradingInfraError(f"grading Job {name} could not start image {image}: {detail}; check that the image "
                                "exists and that the nodes can pull it (registry access, imagePullSecrets)")
    raise GradingInfraError(f"grading Job {name} (image {image}) lost its pod: {detail} ({termination.value}); "
                            "grade the rollout again once the nodes are healthy")
