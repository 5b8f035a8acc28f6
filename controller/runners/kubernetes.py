"""KubernetesRunner: one batch/v1 Job (and one key Secret) per attempt, through the official `kubernetes` client.

Each poll lists the controller's agent Jobs (and their pods) by label and maps their status to an ending
(`k8s_status`); a list per tick, rather than a long-lived watch stream, cannot miss an event when a connection drops.
A task naming an `image` gets a sandbox container in that image beside the harness (`manifests.job_manifest_for`).
Pods stuck on image or config errors are failed as `start_failed` after `image_pull_grace_s`. Creations are
rate-limited by a token bucket. The runner deletes the Jobs and Secrets it created (`release`, `close`). Each Job
carries its controller's identity (`CONTROLLER_LABEL`), so a restarted controller finds the Jobs of its previous life
and deletes those whose rollout it does not hold (`reap_orphans`). The key Secret is replaced at each attempt: a
rollout key is bound to its attempt.
The harness's combined output is copied from the pod log into the stdout file when the attempt ends.
The working directory travels through the gateway's artifacts: `start` uploads the prepared one as
`workdir.tar.gz` (the Job's init container fetches it); when the attempt ends, the `result.tar.gz` the pod's
wrapper uploaded replaces the local working directory, so grading sees the pod's files. Without a result (the pod
was killed, the upload failed) the attempt is graded on the prepared directory and a log event says so.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from controller.config import KubernetesSettings
from controller.runners.base import RunnerFullError, RunnerStartError, RunResult, RunSpec, Termination
from controller.runners.k8s_status import Ending, job_ending, pod_ending
from controller.runners.manifests import (
    AGENT_COMPONENT,
    COMPONENT_LABEL,
    HARNESS_CONTAINER,
    PART_OF,
    PART_OF_LABEL,
    ROLLOUT_ANNOTATION,
    build_secret_manifest,
    job_manifest_for,
    label_value,
    secret_name,
)
from controller.runners.ratelimit import TokenBucket
from controller.workdir_transfer import (
    RESULT_ARCHIVE,
    WORKDIR_ARCHIVE,
    pack_workdir,
    replace_with_archive,
)
from gateway.client_roles import ArtifactClient
from gateway.records import EventKind

log = logging.getLogger("harnessrl.controller")
SELECTOR = f"{PART_OF_LABEL}={PART_OF},{COMPONENT_LABEL}={AGENT_COMPONENT}"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
NO_RESULT = (Termination.START_FAILED, Termination.CANCELLED)  # endings after which no result is looked for
CONTROLLER_LABEL = "harnessrl.io/controller"  # the identity of the controller that created a Job
SECRET_ATTEMPT_ANNOTATION = "harnessrl.io/attempt"  # the attempt whose key a rollout's Secret holds


def api_client(settings: KubernetesSettings) -> Any:
    """An ApiClient for `api_url` (no auth), else the kubeconfig file, else in-cluster, else ~/.kube/config."""
    from kubernetes import client, config

    if settings.api_url:
        configuration = client.Configuration()
        configuration.host = settings.api_url.rstrip("/")
        return client.ApiClient(configuration)
    if settings.kubeconfig:
        return config.new_client_from_config(config_file=settings.kubeconfig)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()


def delete_if_present(method: Any, name: str, namespace: str, **kwargs: Any) -> None:
    """Call the client's `delete_namespaced_*` `method` on `name`; a 404 (already gone) is fine, others are logged."""
    from kubernetes.client.exceptions import ApiException

    try:
        method(name, namespace, _preload_content=False, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            log.warning("deleting %s in %s failed: %s %s", name, namespace, exc.status, exc.reason)


@dataclass
class PodTrouble:
    """Trouble of a still-running Job's pods: an eviction or a lost node ends it at once, a pod stuck on an image or
    config error (START_FAILED) once that has lasted `grace_s` (a pull may still succeed)."""

    grace_s: float  # longest wait on a stuck pod (the settings' image_pull_grace_s)
    stuck_since_s: float | None = None  # monotonic time a pod was first seen stuck

    def ending(self, pods: list[dict[str, Any]], now_s: float) -> Ending | None:
        """The ending the pods call for at `now_s` (monotonic), or None while there is none (yet)."""
        endings = [e for e in (pod_ending(p) for p in pods) if e is not None]
        lost = next((e for e in endings if e[0] in (Termination.EVICTED, Termination.NODE_LOST)), None)
        if lost is not None:
            return lost
        stuck = next((e for e in endings if e[0] == Termination.START_FAILED), None)
        if stuck is None:
            self.stuck_since_s = None
            return None
        self.stuck_since_s = now_s if self.stuck_since_s is None else self.stuck_since_s
        return stuck if now_s - self.stuck_since_s >= self.grace_s else None


@dataclass
class _Job:
    spec: RunSpec
    name: str  # the Job's name
    started_s: float  # monotonic start
    trouble: PodTrouble  # its pods' trouble while it runs
    stopped: Termination | None = None  # set when the runner deleted the Job itself (cancel, start error)
    detail: str = ""  # why it was stopped
    extended_s: float = 0.0  # deadline extensions so far (time the gateway held calls)


class KubernetesRunner:
    """Runs attempts as Jobs in one namespace; driven from the reconcile thread."""

    def __init__(self, settings: KubernetesSettings, concurrency: int, artifacts: ArtifactClient, *,
                 api: Any = None, controller_id: str | None = None) -> None:
        from kubernetes import client

        self.settings, self.concurrency, self.artifacts = settings, concurrency, artifacts
        self.controller_id = controller_id  # labels the Jobs this runner creates (set by reap_orphans if None)
        self._api = api or api_client(settings)
        self._batch, self._core = client.BatchV1Api(self._api), client.CoreV1Api(self._api)
        self._bucket = TokenBucket(settings.creates_per_s, settings.create_burst)
        self._jobs: dict[str, _Job] = {}  # rollout id -> running attempt
        self._ended: dict[str, _Job] = {}  # rollout id -> ended attempt, until released

    def free_slots(self) -> int:
        """Free concurrency, bounded by the creation rate limit."""
        return max(0, min(self.concurrency - len(self._jobs), self._bucket.available()))

    def start(self, spec: RunSpec) -> None:
        """Upload the prepared workdir, create the key Secret (kept if it exists: the key is the same) and the Job."""
        from kubernetes.client.exceptions import ApiException

        if len(self._jobs) >= self.concurrency or not self._bucket.take():
            raise RunnerFullError(f"no free slot or creation budget for {spec.rollout_id!r}; check free_slots()")
        namespace = self.settings.namespace
        try:
            job = job_manifest_for(spec, self.settings)
        except ValueError as exc:
            raise RunnerStartError(f"no Job for {spec.rollout_id!r}: {exc}") from exc
        if self.controller_id is not None:
            job["metadata"]["labels"] = {**job["metadata"]["labels"], CONTROLLER_LABEL: label_value(self.controller_id)}
        self._upload_workdir(spec)
        try:
            self._create_secret(spec)
            self._batch.create_namespaced_job(namespace, job, _preload_content=False)
        except ApiException as exc:
            raise RunnerStartError(f"creating Job {job['metadata']['name']} in {namespace!r} failed: "
                                   f"{exc.status} {exc.reason}: {exc.body}") from exc
        self._jobs[spec.rollout_id] = _Job(spec, job["metadata"]["name"], time.monotonic(),
                                           PodTrouble(self.settings.image_pull_grace_s))

    def _upload_workdir(self, spec: RunSpec) -> None:
        try:
            self.artifacts.put_artifact(spec.rollout_id, WORKDIR_ARCHIVE, pack_workdir(spec.workdir))
        except Exception as exc:  # noqa: BLE001 - gateway down, body too large (413): the attempt cannot start
            raise RunnerStartError(f"uploading {spec.workdir} as {WORKDIR_ARCHIVE} for {spec.rollout_id!r} failed: "
                                   f"{exc}; check the gateway and its max_body_bytes") from exc

    def _create_secret(self, spec: RunSpec) -> None:
        """Create the rollout's key Secret; one left by an earlier attempt holds that attempt's key: replace it."""
        from kubernetes.client.exceptions import ApiException

        manifest = build_secret_manifest(spec, self.settings.namespace)
        annotations = {**(manifest["metadata"].get("annotations") or {}), SECRET_ATTEMPT_ANNOTATION: str(spec.attempt)}
        manifest["metadata"]["annotations"] = annotations
        try:
            self._core.create_namespaced_secret(self.settings.namespace, manifest, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
            delete_if_present(self._core.delete_namespaced_secret, secret_name(spec.rollout_id),
                              self.settings.namespace)
            self._core.create_namespaced_secret(self.settings.namespace, manifest, _preload_content=False)

    def poll(self) -> list[RunResult]:
        """Ended attempts: Job conditions, pod reasons, vanished Jobs, pods stuck on image errors."""
        if not self._jobs:
            return []
        jobs = {j["metadata"]["name"]: j for j in self._list("jobs")}
        pods: dict[str, list[dict[str, Any]]] = {}
        for pod in self._list("pods"):
            labels = pod["metadata"].get("labels") or {}
            owner = next((labels[k] for k in JOB_NAME_LABELS if k in labels), None)
            pods.setdefault(owner or "", []).append(pod)
        ended = []
        for rollout_id, job in list(self._jobs.items()):
            ending = self._ending(job, jobs.get(job.name), pods.get(job.name, []))
            if ending is not None:
                ended.append(self._finish(rollout_id, job, ending))
        return ended

    def _list(self, kind: str) -> list[dict[str, Any]]:
        namespace = self.settings.namespace
        if kind == "jobs":
            response = self._batch.list_namespaced_job(namespace, label_selector=SELECTOR, _preload_content=False)
        else:
            response = self._core.list_namespaced_pod(namespace, label_selector=SELECTOR, _preload_content=False)
        return json.loads(response.data)["items"]

    def _ending(self, job: _Job, found: dict[str, Any] | None, pods: list[dict[str, Any]]) -> Ending | None:
        if job.stopped is not None:
            return job.stopped, None, job.detail
        if found is None:
            return Termination.NODE_LOST, None, f"Job {job.name} disappeared (deleted outside the controller?)"
        return job_ending(found, pods) or job.trouble.ending(pods, time.monotonic())

    def _finish(self, rollout_id: str, job: _Job, ending: Ending) -> RunResult:
        termination, exit_code, detail = ending
        del self._jobs[rollout_id]
        self._ended[rollout_id] = job
        self._copy_logs(job)
        if termination not in NO_RESULT:
            self._fetch_result(job.spec)
        if termination in (Termination.START_FAILED, Termination.EVICTED, Termination.NODE_LOST):
            self._delete_job(job.name)  # a stuck or orphaned Job must not start late
        return RunResult(rollout_id, job.spec.attempt, termination, exit_code, detail,
                         time.monotonic() - job.started_s)

    def _copy_logs(self, job: _Job) -> None:
        from kubernetes.client.exceptions import ApiException

        pods = [p for p in self._list("pods") if job.name in (p["metadata"].get("labels") or {}).values()]
        text = ""
        for pod in pods:
            try:
                response = self._core.read_namespaced_pod_log(pod["metadata"]["name"], self.settings.namespace,
                                                              container=HARNESS_CONTAINER, _preload_content=False)
                text += response.data.decode("utf-8", "replace")
            except ApiException as exc:
                text += f"[harnessrl] no log for pod {pod['metadata']['name']}: {exc.status} {exc.reason}\n"
        job.spec.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        job.spec.stdout_path.write_text(text)
        job.spec.stderr_path.write_text("[harnessrl] Kubernetes merges stderr into the pod log (see stdout)\n")

    def _fetch_result(self, spec: RunSpec) -> None:
        """Replace the local workdir with the pod's `result.tar.gz`; without one, keep it and say so in an event."""
        try:
            data = self.artifacts.get_artifact(spec.rollout_id, RESULT_ARCHIVE, attempt=spec.attempt)
            names = replace_with_archive(data, spec.workdir)
            log.info("rollout %s attempt %s: %d entries returned from the pod", spec.rollout_id, spec.attempt,
                     len(names))
            return
        except Exception as exc:  # noqa: BLE001 - absent (404), unreachable or unsafe: grade what is there
            message = (f"no usable {RESULT_ARCHIVE} from the pod of attempt {spec.attempt} ({exc}); grading the "
                       "prepared working directory as it was before the harness ran")
        log.warning("rollout %s: %s", spec.rollout_id, message)
        try:
            self.artifacts.post_event(spec.rollout_id, EventKind.LOG, {"message": message, "attempt": spec.attempt})
        except Exception as exc:  # noqa: BLE001 - the note is best effort
            log.warning("could not post the missing-result event of %s: %s", spec.rollout_id, exc)

    def reap_orphans(self, controller_id: str, held: Collection[str]) -> list[str]:
        """Delete the Jobs labelled with `controller_id` whose rollout is neither in `held` nor run by this runner:
        those a previous life of this controller left behind (their Secrets hold keys of attempts that are over)."""
        self.controller_id = self.controller_id or controller_id
        namespace = self.settings.namespace
        selector = f"{SELECTOR},{CONTROLLER_LABEL}={label_value(controller_id)}"
        response = self._batch.list_namespaced_job(namespace, label_selector=selector, _preload_content=False)
        ours = {job.name for job in [*self._jobs.values(), *self._ended.values()]}
        reaped = []
        for job in json.loads(response.data)["items"]:
            meta = job["metadata"]
            rollout_id = (meta.get("annotations") or {}).get(ROLLOUT_ANNOTATION, meta["name"])
            if meta["name"] in ours or rollout_id in held:
                continue
            log.warning("deleting Job %s of rollout %s: left by an earlier life of controller %s", meta["name"],
                        rollout_id, controller_id)
            self._delete_job(meta["name"])
            reaped.append(rollout_id)
        return reaped

    def extend_deadline(self, rollout_id: str, extra_s: float) -> None:
        """Raise the running attempt's Job activeDeadlineSeconds by `extra_s` (a Job's deadline may be updated)."""
        from kubernetes.client.exceptions import ApiException

        job = self._jobs.get(rollout_id)
        if job is None or job.stopped is not None:
            return
        job.extended_s += extra_s
        deadline_s = max(1, math.ceil(job.spec.timeout_s + job.extended_s))
        try:
            self._batch.patch_namespaced_job(job.name, self.settings.namespace,
                                             {"spec": {"activeDeadlineSeconds": deadline_s}}, _preload_content=False)
        except ApiException as exc:  # the next extension patches the whole total again
            log.warning("could not extend the deadline of Job %s to %d s: %s %s", job.name, deadline_s, exc.status,
                        exc.reason)

    def cancel(self, rollout_id: str) -> None:
        """Delete the attempt's Job now; the next poll reports it as cancelled."""
        job = self._jobs.get(rollout_id)
        if job is not None and job.stopped is None:
            job.stopped, job.detail = Termination.CANCELLED, f"Job {job.name} deleted by the controller"
            self._delete_job(job.name)

    def release(self, rollout_id: str) -> None:
        """Delete the ended attempt's Job (and its pods) and the rollout's key Secret, unless the Secret now holds a
        later attempt's key (another controller took the rollout over)."""
        job = self._ended.pop(rollout_id, None)
        if job is None:
            return
        self._delete_job(job.name)
        self._delete_secret_of(job.spec)

    def _delete_secret_of(self, spec: RunSpec) -> None:
        from kubernetes.client.exceptions import ApiException

        name, namespace = secret_name(spec.rollout_id), self.settings.namespace
        try:
            secret = json.loads(self._core.read_namespaced_secret(name, namespace, _preload_content=False).data)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading Secret %s in %s failed: %s %s", name, namespace, exc.status, exc.reason)
            return
        meta = secret["metadata"]
        holder = (meta.get("annotations") or {}).get(SECRET_ATTEMPT_ANNOTATION)
        if holder is not None and holder != str(spec.attempt):
            return  # a later attempt's key: not ours to delete
        delete_if_present(self._core.delete_namespaced_secret, name, namespace,
                          body={"preconditions": {"uid": meta.get("uid")}})

    def _delete_job(self, name: str) -> None:
        delete_if_present(self._batch.delete_namespaced_job, name, self.settings.namespace,
                          propagation_policy="Background")

    def close(self) -> None:
        """Delete every Job and Secret this runner still holds."""
        for rollout_id in list(self._jobs):
            self.cancel(rollout_id)
            self._finish(rollout_id, self._jobs[rollout_id], (Termination.CANCELLED, None, "runner closed"))
        for rollout_id in list(self._ended):
            self.release(rollout_id)
