"""Pure builders of a grading Job (shared with `swe_bench`) and of the `swe` recipe's: one fresh pod per rollout that
runs the graded checkout's tests with the grader's isolated runner (`grading_job_pod`) and prints the verdict.

The `swe` Job's input is a Secret (`harnessrl-grade-<hash>`, Kubernetes caps one at 1 MiB) mounted read-only at
POD_GRADE_DIR: the graded checkout as `repo.tar.gz` (the agent's allowed diff applied to a fresh copy of the task's
base: no .git, no gold patch, no instances), the grader's runner files (outcomes plugin, empty ini, wanted ids, the
sentinel) and `run.json` (pytest's arguments, the time limit). The pod is the sandbox: non-root, no API token, no
service links, read-only root file system with an emptyDir work dir, no privilege escalation, no capabilities,
RuntimeDefault seccomp, the grader NetworkPolicy's labels (no egress), a deadline, CPU/memory limits. An init
container unpacks the checkout into an emptyDir that the grading container mounts read-only (the tests cannot change
the checkout, as under bubblewrap where it is root-owned); the only writable place is a small emptyDir at /tmp. The
verdict's nonce travels in the grading container's environment, never in the Secret the tested code can read.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import secrets
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.config import KubernetesSettings
from controller.runners.manifests import COMPONENT_LABEL, PART_OF, PART_OF_LABEL, label_value
from recipes.swe.testrun import BOUNDARY_FILES, WANTED_FILE, prepare_runner, pytest_args

GRADER_COMPONENT = "grader"  # the component label of grading pods (the grader NetworkPolicy selects it)
GRADE_CONTAINER = "grade"  # the container whose log is the verdict's input
INSTANCE_LABEL = "harnessrl.io/instance-id"
MAX_SECRET_BYTES = 1024 * 1024 - 16 * 1024  # Kubernetes' 1 MiB limit on a Secret, less room for its metadata
POD_GRADE_DIR = "/var/run/harnessrl-grade"  # the Secret's mount (read-only)
POD_CHECKOUT_DIR = "/checkout"  # emptyDir: the unpacked checkout (written by the init container, read-only after)
POD_TMP_DIR = "/tmp"  # emptyDir: the only writable place of the tests (HOME, TMPDIR, the output file)
POD_MODULE = "recipes.swe.grading_job_pod"  # the pod's entry point, run as `python -I -B -m`
POD_PYTHON = "python"  # the image's interpreter (it has the project and pytest installed)
POD_UID = 10001  # the image's unprivileged user
NONCE_ENV = "HARNESSRL_GRADE_NONCE"  # the verdict's nonce, in the container's environment only
REPO_ARCHIVE, RUN_FILE = "repo.tar.gz", "run.json"
REPO_TOKEN, GRADE_TOKEN = "@REPO@", "@GRADE@"  # stand for the pod's checkout and input directories in run.json
# Both emptyDirs are memory-backed: a full one is ENOSPC inside the pod (the tests' failure), never an eviction
# (which would be the cluster's failure); they count toward the pod's memory limit.
CHECKOUT_DISK, TMP_DISK = "64Mi", "512Mi"
DEADLINE_MARGIN_S = 120  # the Job's deadline past the tests' time limit (unpacking, start-up)


class GradingInputTooLarge(ValueError):
    """The grading input does not fit in one Secret."""


def grading_name(instance_id: str, attempt_key: str) -> str:
    """`harnessrl-grade-<hash>`: the grading Job's and Secret's name, unique per instance and attempt."""
    return f"harnessrl-grade-{hashlib.sha256(f'{instance_id}/{attempt_key}'.encode()).hexdigest()[:16]}"


def grading_labels(instance_id: str) -> dict[str, str]:
    """Labels of the grading objects."""
    return {PART_OF_LABEL: PART_OF, COMPONENT_LABEL: GRADER_COMPONENT, INSTANCE_LABEL: label_value(instance_id)}


def pack_checkout(repo: Path) -> bytes:
    """The checkout as a gzipped tar (paths relative to it; no .git; symlinks kept as links, never followed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=9) as archive:
        for path in sorted(repo.rglob("*")):
            relative = path.relative_to(repo)
            if ".git" in relative.parts:
                continue
            info = archive.gettarinfo(str(path), arcname=str(relative))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            elif info.isdir() or info.issym():
                archive.addfile(info)
    return buffer.getvalue()


def pod_pytest_args(repo: Path, test_ids: list[str], sentinel_name: str) -> list[str]:
    """pytest's arguments as `testrun` builds them for `repo` (its configuration file chosen here), with the
    checkout's and the input's directories written as REPO_TOKEN and GRADE_TOKEN for the pod to fill in."""
    local = str(repo.resolve())
    args = pytest_args(repo.resolve(), Path(GRADE_TOKEN), test_ids, Path(GRADE_TOKEN) / sentinel_name)
    return [arg.replace(local, REPO_TOKEN) for arg in args]


def pack_grading_input(repo: Path, test_ids: list[str], timeout_s: float,
                       watched: Sequence[str] = ()) -> dict[str, bytes]:
    """The Secret's files: the graded checkout, the runner files (the verdict guard watching `watched`, the files the
    agent's diff changed) and run.json; GradingInputTooLarge past the limit."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-grade-input-") as scratch:
        runner = Path(scratch) / "runner"
        sentinel = prepare_runner(runner, test_ids, watched)
        assert sentinel is not None  # explicit test ids always get a sentinel
        files = {path.name: path.read_bytes() for path in sorted(runner.iterdir())}
    run = {"pytest_args": pod_pytest_args(repo, test_ids, sentinel.name), "timeout_s": timeout_s}
    files |= {REPO_ARCHIVE: pack_checkout(repo), RUN_FILE: json.dumps(run).encode()}
    size = sum(len(data) for data in files.values())
    if size > MAX_SECRET_BYTES:
        raise GradingInputTooLarge(f"the grading input (the packed checkout and the runner files) takes {size} bytes, "
                                   f"over the {MAX_SECRET_BYTES} bytes a Kubernetes Secret holds; grade this task "
                                   "with the local runner or use a smaller project")
    return files


def probe_input(files: Mapping[str, bytes], test_ids: list[str]) -> dict[str, bytes]:
    """The forgery probe's grading input (`forgery_probe`): the same checkout and runner files without the process
    boundary's, so that the pod runs the repository's modules in pytest's own process, wanting only `test_ids` (a
    subset of the input's: pytest still collects their files, the plugin deselects the rest)."""
    kept = {name: data for name, data in files.items() if name not in BOUNDARY_FILES}
    return kept | {WANTED_FILE: json.dumps(test_ids).encode()}


def new_nonce() -> str:
    """A fresh verdict nonce."""
    return secrets.token_hex(16)


def build_swe_grading_secret(files: Mapping[str, bytes], instance_id: str, name: str,
                             namespace: str) -> dict[str, Any]:
    """The Secret holding the packed input (binary data, base64 as the API wants it)."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": grading_labels(instance_id)},
            "type": "Opaque", "data": {key: base64.b64encode(value).decode() for key, value in files.items()}}


def _security() -> dict[str, Any]:
    """A container that cannot gain anything: non-root, read-only root, no capabilities, RuntimeDefault seccomp."""
    return {"runAsNonRoot": True, "runAsUser": POD_UID, "runAsGroup": POD_UID, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def _containers(settings: KubernetesSettings, nonce: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the init container unpacking the checkout, the grading container running the tests as PID 1)."""
    amount = {"cpu": settings.cpu, "memory": settings.memory}
    common = {"image": settings.image, "imagePullPolicy": settings.image_pull_policy,
              "resources": {"requests": dict(amount), "limits": dict(amount)}, "securityContext": _security()}
    entry = [POD_PYTHON, "-I", "-B", "-m", POD_MODULE]
    unpack = {"name": "unpack", **common, "command": [*entry, "unpack", POD_GRADE_DIR, POD_CHECKOUT_DIR],
              "volumeMounts": [{"name": "grade", "mountPath": POD_GRADE_DIR, "readOnly": True},
                               {"name": "checkout", "mountPath": POD_CHECKOUT_DIR}]}
    grade = {"name": GRADE_CONTAINER, **common,
             "command": [*entry, "run", POD_GRADE_DIR, POD_CHECKOUT_DIR, POD_TMP_DIR],
             "env": [{"name": NONCE_ENV, "value": nonce}],
             "volumeMounts": [{"name": "grade", "mountPath": POD_GRADE_DIR, "readOnly": True},
                              {"name": "checkout", "mountPath": POD_CHECKOUT_DIR, "readOnly": True},
                              {"name": "tmp", "mountPath": POD_TMP_DIR}]}
    return unpack, grade


def build_swe_grading_job(instance_id: str, name: str, settings: KubernetesSettings, timeout_s: float,
                          nonce: str) -> dict[str, Any]:
    """The batch/v1 Job grading one rollout of the `swe` recipe: no retries, a hard deadline, a TTL, no token."""
    labels = grading_labels(instance_id)
    unpack, grade = _containers(settings, nonce)
    pod = {"restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
           "shareProcessNamespace": False, "hostPID": False, "hostIPC": False, "hostNetwork": False,
           "securityContext": {"runAsNonRoot": True, "runAsUser": POD_UID, "runAsGroup": POD_UID,
                               "seccompProfile": {"type": "RuntimeDefault"}},
           "initContainers": [unpack], "containers": [grade],
           "volumes": [{"name": "grade", "secret": {"secretName": name, "defaultMode": 0o444}},
                       {"name": "checkout", "emptyDir": {"medium": "Memory", "sizeLimit": CHECKOUT_DISK}},
                       {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_DISK}}]}
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": settings.namespace, "labels": labels},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": math.ceil(timeout_s) + DEADLINE_MARGIN_S,
                     "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}
