"""The sandboxed Job (a task with an `image`): valid against the official schemas (strict), the sidecar's shape, the
shared directory, no token and no workspace in the sandbox; image references checked; the runner's choice."""

from __future__ import annotations

import kubernetes_validate
import pytest

from controller.config import KubernetesSettings
from controller.runners.manifests import (
    SANDBOX_IPC_DIR,
    build_job_manifest,
    build_sandboxed_job_manifest,
    check_image_reference,
    job_manifest_for,
)
from controller.sandbox_channel import SANDBOX_DIR_ENV, sandbox_command
from tests.controller.test_manifests import K8S_VERSIONS, spec

IMAGE = "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_sandboxed_job_validates_strictly(version):
    settings = KubernetesSettings(namespace="agents", service_account="agent")
    kubernetes_validate.validate(build_sandboxed_job_manifest(spec(), settings, IMAGE), version, strict=True)


def test_strict_validation_catches_an_unknown_sidecar_field():
    job = build_sandboxed_job_manifest(spec(), KubernetesSettings(), IMAGE)
    job["spec"]["template"]["spec"]["initContainers"][-1]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSIONS[-1], strict=True)


def test_the_sandbox_is_a_native_sidecar_sharing_only_the_channel_directory():
    settings = KubernetesSettings(cpu="2", memory="4Gi", image_pull_policy="Always")
    plain = build_job_manifest(spec(), settings)
    job = build_sandboxed_job_manifest(spec(), settings, IMAGE)
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["task", "workdir", "sandbox"]
    sandbox = pod["initContainers"][-1]
    assert (sandbox["image"], sandbox["restartPolicy"], sandbox["workingDir"]) == (IMAGE, "Always", "/testbed")
    assert sandbox["imagePullPolicy"] == "Always" and sandbox["command"] == sandbox_command(SANDBOX_IPC_DIR)
    assert sandbox["volumeMounts"] == [{"name": "sandbox-ipc", "mountPath": SANDBOX_IPC_DIR}]
    assert "env" not in sandbox  # no key, no gateway URL
    assert sandbox["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"}
    assert sandbox["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    [harness] = pod["containers"]
    assert {"name": "sandbox-ipc", "mountPath": SANDBOX_IPC_DIR} in harness["volumeMounts"]
    assert {"name": SANDBOX_DIR_ENV, "value": SANDBOX_IPC_DIR} in harness["env"]
    assert harness["command"] == plain["spec"]["template"]["spec"]["containers"][0]["command"]
    assert {"name": "sandbox-ipc", "emptyDir": {"sizeLimit": "10Gi"}} in pod["volumes"]
    assert pod["automountServiceAccountToken"] is False
    assert job["metadata"] == plain["metadata"]  # same labels and name: the runner's selectors see it


@pytest.mark.parametrize("image", [IMAGE, "registry.local:5000/team/img@sha256:" + "a" * 64, "ubuntu",
                                   "ghcr.io/org/repo-name/sub_path:v1.2-rc.3"])
def test_plausible_image_references_pass(image):
    assert check_image_reference(image) == image


@pytest.mark.parametrize("image", ["", "Upper/Case:1", "a b", "img:tag;rm -rf /", None, 3, "img:" + "t" * 200,
                                   "--privileged", "/abs/path"])
def test_implausible_image_references_are_refused_with_the_expected_form(image):
    with pytest.raises(ValueError, match=r"not an image reference.*\[host\[:port\]/\]path"):
        check_image_reference(image)


def test_the_runner_builds_the_sandboxed_job_only_for_a_task_with_an_image():
    settings = KubernetesSettings()
    assert job_manifest_for(spec(), settings) == build_job_manifest(spec(), settings)
    with_image = spec()
    with_image = type(with_image)(**{**with_image.__dict__, "task": {"id": "t1", "image": IMAGE}})
    assert job_manifest_for(with_image, settings) == build_sandboxed_job_manifest(with_image, settings, IMAGE)
    bad = type(with_image)(**{**with_image.__dict__, "task": {"id": "t1", "image": "Bad Image"}})
    with pytest.raises(ValueError, match="Bad Image"):
        job_manifest_for(bad, settings)
