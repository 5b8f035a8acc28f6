"""Pure builders of the Kubernetes objects of one attempt: the agent Job, its key Secret, names, labels and env.

The Secret holds the rollout's key (`api-key`) and the task (`task.json`); the harness gets the key through
`secretKeyRef`. Init containers copy the task into the working directory (/workspace) and then download the
controller's prepared working directory (`workdir.tar.gz`, the recipe's layout) from the gateway into it; the harness
runs under a wrapper that packs /workspace after it exits and uploads it as `result.tar.gz` for grading
(`pod_transfer`). So the harness contract is the same as under the LocalRunner. A task with an `image` key gets a
`sandbox` sidecar in that image (`build_sandboxed_job_manifest`), where the harness runs the agent's commands.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.config import KubernetesSettings
from controller.pod_transfer import fetch_command, run_and_return_command
from controller.runners.base import RunSpec
from controller.sandbox_channel import SANDBOX_DIR_ENV, sandbox_command
from controller.workdir_transfer import RESULT_ARCHIVE, WORKDIR_ARCHIVE

PART_OF_LABEL, PART_OF = "app.kubernetes.io/part-of", "harnessrl"
COMPONENT_LABEL, AGENT_COMPONENT = "harnessrl.io/component", "agent"
ROLLOUT_LABEL = "harnessrl.io/rollout-id"
ATTEMPT_LABEL = "harnessrl.io/attempt"
ROLLOUT_ANNOTATION = "harnessrl.io/rollout-id-full"  # the unsanitised id
GATEWAY_SERVICE, GATEWAY_PORT = "harnessrl-gateway", 8100
SECRET_KEY, TASK_KEY = "api-key", "task.json"
WORKDIR, TASK_MOUNT = "/workspace", "/var/run/harnessrl"
HARNESS_CONTAINER, TASK_CONTAINER, WORKDIR_CONTAINER = "harness", "task", "workdir"
SANDBOX_CONTAINER, SANDBOX_VOLUME = "sandbox", "sandbox-ipc"
SANDBOX_IPC_DIR = "/var/run/harnessrl-sandbox"  # the directory the harness and sandbox containers share
SANDBOX_WORKDIR = "/testbed"  # SWE-bench's repository dir in its images (the swe_bench harness and grading use it)
IMAGE_KEY = "image"  # a task key: run the attempt's commands in this image (a sandbox container beside the harness)
# [host[:port]/]path[:tag][@sha256:digest], lower-case path components: a plausible OCI image reference.
IMAGE_REFERENCE = re.compile(r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
                             r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                             r"(?:@sha256:[a-f0-9]{64})?$")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def _digest(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars, alphanumeric ends); changed or long ids get a hash suffix to stay unique."""
    clean = _LABEL_BAD.sub("_", text).strip("._-")
    if clean == text and len(clean) <= 63:
        return clean
    return f"{clean[:54].rstrip('._-')}-{_digest(text, 8)}".lstrip("-")


def secret_name(rollout_id: str) -> str:
    """`harnessrl-rollout-<hash>`: the rollout key Secret (one per rollout)."""
    return f"harnessrl-rollout-{_digest(rollout_id, 16)}"


def job_name(rollout_id: str, attempt: int) -> str:
    """A DNS-1123 Job name (<= 63 chars) unique per rollout attempt, readable where the id allows."""
    slug = _NAME_BAD.sub("-", rollout_id.lower()).strip("-")[:30].rstrip("-")
    return "-".join(part for part in ("hrl", slug, _digest(rollout_id, 8), f"a{attempt}") if part)


def agent_labels(rollout_id: str) -> dict[str, str]:
    """Labels of every object of a rollout (the controller's selectors and deploy/'s NetworkPolicy use them)."""
    return {PART_OF_LABEL: PART_OF, COMPONENT_LABEL: AGENT_COMPONENT, ROLLOUT_LABEL: label_value(rollout_id)}


def build_env(base_url: str, secret: str, extra_env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The harness contract as container env: the key comes from the Secret, never inline."""
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in sorted(extra_env.items())]
    env += [*gateway_env(base_url, secret),
            {"name": "HARNESSRL_TASK", "value": f"{WORKDIR}/{TASK_KEY}"},
            {"name": "HOME", "value": WORKDIR}]
    return env


def gateway_env(base_url: str, secret: str) -> list[dict[str, Any]]:
    """The part of the contract the workdir download needs: the rollout URL and its key (from the Secret)."""
    return [{"name": "OPENAI_BASE_URL", "value": base_url},
            {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": SECRET_KEY}}}]


def build_secret_manifest(spec: RunSpec, namespace: str) -> dict[str, Any]:
    """The rollout's Secret: its key and its task."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret_name(spec.rollout_id), "namespace": namespace,
                         "labels": agent_labels(spec.rollout_id),
                         "annotations": {ROLLOUT_ANNOTATION: spec.rollout_id}},
            "type": "Opaque", "stringData": {SECRET_KEY: spec.api_key, TASK_KEY: json.dumps(dict(spec.task))}}


def _resources(settings: KubernetesSettings) -> dict[str, Any]:
    amount = {"cpu": settings.cpu, "memory": settings.memory, "ephemeral-storage": settings.ephemeral_storage}
    return {"requests": dict(amount), "limits": dict(amount)}


def pod_command(command: Sequence[str]) -> list[str]:
    """The harness command as the agent image runs it: the controller's own interpreter path (recipes use
    sys.executable locally) becomes the image's `python`."""
    head, *rest = command
    is_interpreter = Path(head).is_absolute() and Path(head).name.startswith("python")
    return ["python", *rest] if is_interpreter else [head, *rest]


def _pod_spec(spec: RunSpec, settings: KubernetesSettings) -> dict[str, Any]:
    secret = secret_name(spec.rollout_id)
    locked = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    mounts = [{"name": "workspace", "mountPath": WORKDIR}]
    image = {"image": settings.image, "imagePullPolicy": settings.image_pull_policy}
    task = {"name": TASK_CONTAINER, **image, "command": ["cp", f"{TASK_MOUNT}/{TASK_KEY}", f"{WORKDIR}/{TASK_KEY}"],
            "volumeMounts": [*mounts, {"name": "task", "mountPath": TASK_MOUNT, "readOnly": True}],
            "resources": _resources(settings), "securityContext": locked}
    workdir = {"name": WORKDIR_CONTAINER, **image, "command": fetch_command(WORKDIR, WORKDIR_ARCHIVE),
               "env": gateway_env(spec.base_url, secret), "volumeMounts": mounts,
               "resources": _resources(settings), "securityContext": locked}
    harness = {"name": HARNESS_CONTAINER, **image, "workingDir": WORKDIR,
               "command": run_and_return_command(WORKDIR, RESULT_ARCHIVE, pod_command(spec.command)),
               "env": build_env(spec.base_url, secret, spec.extra_env), "volumeMounts": mounts,
               "resources": _resources(settings), "securityContext": locked}
    pod: dict[str, Any] = {
        "restartPolicy": "Never", "automountServiceAccountToken": False,
        "initContainers": [task, workdir], "containers": [harness],
        "volumes": [{"name": "workspace", "emptyDir": {"sizeLimit": settings.ephemeral_storage}},
                    {"name": "task", "secret": {"secretName": secret, "items": [{"key": TASK_KEY, "path": TASK_KEY}]}}],
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    return pod


def build_job_manifest(spec: RunSpec, settings: KubernetesSettings) -> dict[str, Any]:
    """The batch/v1 Job of one attempt: no retries by Kubernetes (the controller retries), a hard deadline, a TTL."""
    labels = {**agent_labels(spec.rollout_id), ATTEMPT_LABEL: str(spec.attempt)}
    metadata = {"labels": labels, "annotations": {ROLLOUT_ANNOTATION: spec.rollout_id}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name(spec.rollout_id, spec.attempt), "namespace": settings.namespace,
                         **metadata},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": max(1, math.ceil(spec.timeout_s)),
                     "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
                     "template": {"metadata": metadata, "spec": _pod_spec(spec, settings)}}}


def check_image_reference(image: object) -> str:
    """`image` when it is a plausible image reference; ValueError naming it and the expected form otherwise."""
    if not isinstance(image, str) or len(image) > 512 or not IMAGE_REFERENCE.match(image):
        raise ValueError(f"task image {image!r} is not an image reference; write it as [host[:port]/]path[:tag]"
                         "[@sha256:digest] with a lower-case path, e.g. swebench/sweb.eval.x86_64.<id>:latest")
    return image


def build_sandboxed_job_manifest(spec: RunSpec, settings: KubernetesSettings, image: str) -> dict[str, Any]:
    """The attempt's Job with a `sandbox` container running `image` beside the harness: a native sidecar (an init
    container with restartPolicy Always, Kubernetes >= 1.29) that runs the commands the harness drops into a shared
    emptyDir (`controller.sandbox_channel`) and is stopped when the harness exits. The harness finds the directory
    in $HARNESSRL_SANDBOX_DIR; the sandbox sees neither /workspace nor the key, and mounts no API token."""
    job = build_job_manifest(spec, settings)
    pod = job["spec"]["template"]["spec"]
    mount = {"name": SANDBOX_VOLUME, "mountPath": SANDBOX_IPC_DIR}
    sandbox = {"name": SANDBOX_CONTAINER, "image": check_image_reference(image),
               "imagePullPolicy": settings.image_pull_policy, "restartPolicy": "Always",
               "command": sandbox_command(SANDBOX_IPC_DIR), "workingDir": SANDBOX_WORKDIR, "volumeMounts": [mount],
               "resources": _resources(settings),
               "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
    pod["initContainers"].append(sandbox)
    [harness] = pod["containers"]
    harness["volumeMounts"].append(mount)
    harness["env"].append({"name": SANDBOX_DIR_ENV, "value": SANDBOX_IPC_DIR})
    pod["volumes"].append({"name": SANDBOX_VOLUME, "emptyDir": {"sizeLimit": settings.ephemeral_storage}})
    return job


def job_manifest_for(spec: RunSpec, settings: KubernetesSettings) -> dict[str, Any]:
    """The sandboxed Job when the task names an `image`, else the plain one."""
    image = spec.task.get(IMAGE_KEY)
    return build_job_manifest(spec, settings) if image is None else build_sandboxed_job_manifest(spec, settings, image)
