"""Job and Secret manifests: valid against the official schemas (strict), the labels, env contract and limits."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from controller.config import KubernetesSettings
from controller.pod_transfer import fetch_command, run_and_return_command
from controller.runners.base import RunSpec
from controller.runners.manifests import (
    build_job_manifest,
    build_secret_manifest,
    job_name,
    label_value,
    secret_name,
)

K8S_VERSIONS = ["1.30.0", "1.37.0"]
AGENT_JOB = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "agent-job.yaml"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ROLLOUT_ID = st.from_regex(r"[A-Za-z0-9._:-]{1,200}", fullmatch=True)


def spec(rollout_id: str = "grp-7:3", attempt: int = 2, timeout_s: float = 90.5) -> RunSpec:
    return RunSpec(rollout_id=rollout_id, attempt=attempt, command=("python", "-m", "recipes.search.harness"),
                   base_url="http://harnessrl-gateway:8100/r/grp-7:3/v1", api_key="hrl.abc.def",
                   task={"id": "t1", "question": "q?"}, workdir=Path("/tmp/w"), timeout_s=timeout_s,
                   stdout_path=Path("/tmp/o"), stderr_path=Path("/tmp/e"), extra_env={"HARNESS_MODEL": "policy"})


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_job_and_secret_validate_strictly(version):
    settings = KubernetesSettings(namespace="agents", service_account="agent")
    kubernetes_validate.validate(build_job_manifest(spec(), settings), version, strict=True)
    kubernetes_validate.validate(build_secret_manifest(spec(), "agents"), version, strict=True)


def test_strict_validation_catches_an_unknown_field():
    job = build_job_manifest(spec(), KubernetesSettings())
    job["spec"]["backoffLimits"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSIONS[-1], strict=True)


def test_job_carries_the_contract_labels_limits_and_no_inline_key():
    settings = KubernetesSettings(namespace="agents", cpu="2", memory="4Gi", ephemeral_storage="5Gi",
                                  ttl_after_finished_s=300)
    job = build_job_manifest(spec(), settings)
    labels = {"app.kubernetes.io/part-of": "harnessrl", "harnessrl.io/component": "agent",
              "harnessrl.io/rollout-id": label_value("grp-7:3"), "harnessrl.io/attempt": "2"}
    assert job["metadata"]["labels"] == labels == job["spec"]["template"]["metadata"]["labels"]
    assert job["metadata"]["annotations"] == {"harnessrl.io/rollout-id-full": "grp-7:3"}
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"],
            job["spec"]["ttlSecondsAfterFinished"]) == (0, 91, 300)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    [harness] = pod["containers"]
    amount = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "5Gi"}  # past the disk limit: evicted, its own failure
    assert harness["resources"] == {"requests": amount, "limits": amount}
    assert pod["volumes"][0] == {"name": "workspace", "emptyDir": {"sizeLimit": "5Gi"}}
    env = {e["name"]: e for e in harness["env"]}
    assert env["OPENAI_BASE_URL"]["value"] == "http://harnessrl-gateway:8100/r/grp-7:3/v1"
    assert env["OPENAI_API_KEY"] == {"name": "OPENAI_API_KEY", "valueFrom": {
        "secretKeyRef": {"name": secret_name("grp-7:3"), "key": "api-key"}}}
    assert env["HARNESSRL_TASK"]["value"] == "/workspace/task.json" and harness["workingDir"] == "/workspace"
    assert env["HARNESS_MODEL"]["value"] == "policy"
    assert "hrl.abc.def" not in str(job)
    assert harness["command"] == run_and_return_command("/workspace", "result.tar.gz",
                                                        ["python", "-m", "recipes.search.harness"])
    task, workdir = pod["initContainers"]
    assert task["command"] == ["cp", "/var/run/harnessrl/task.json", "/workspace/task.json"]
    assert workdir["command"] == fetch_command("/workspace", "workdir.tar.gz")
    assert [e["name"] for e in workdir["env"]] == ["OPENAI_BASE_URL", "OPENAI_API_KEY"]
    assert workdir["env"][1] == env["OPENAI_API_KEY"]


def test_the_documented_agent_job_runs_the_same_transfer_programs():
    """deploy/k8s/agent-job.yaml shows the init container and the wrapper with the builder's exact programs."""
    documented = yaml.safe_load(AGENT_JOB.read_text())["spec"]["template"]["spec"]
    inits = {c["name"]: c for c in documented["initContainers"]}
    workdir_dir = documented["containers"][0]["workingDir"]
    assert inits["workdir"]["command"] == fetch_command(workdir_dir, "workdir.tar.gz")
    [harness] = documented["containers"]
    assert harness["command"][:5] == run_and_return_command(workdir_dir, "result.tar.gz", [])
    assert {e["name"] for e in inits["workdir"]["env"]} == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}


def test_secret_holds_key_and_task():
    secret = build_secret_manifest(spec(), "agents")
    assert secret["metadata"]["name"] == secret_name("grp-7:3")
    assert re.fullmatch(r"harnessrl-rollout-[0-9a-f]{16}", secret["metadata"]["name"])
    assert secret["stringData"] == {"api-key": "hrl.abc.def", "task.json": '{"id": "t1", "question": "q?"}'}


@pytest.mark.parametrize(("rollout_id", "expected"), [
    ("abc", "abc"), ("a.b_c-d", "a.b_c-d"), ("x" * 63, "x" * 63),
])
def test_label_value_keeps_valid_ids(rollout_id, expected):
    assert label_value(rollout_id) == expected


@given(ROLLOUT_ID, st.integers(1, 100))
def test_names_and_labels_are_always_valid_and_distinct(rollout_id, attempt):
    value = label_value(rollout_id)
    assert LABEL_VALUE.match(value) and len(value) <= 63
    name = job_name(rollout_id, attempt)
    assert DNS_LABEL.match(name) and len(name) <= 63
    assert job_name(rollout_id, attempt) != job_name(rollout_id, attempt + 1)
    assert label_value(rollout_id + ":") != value and job_name(rollout_id + ":", attempt) != name
    assert len(secret_name(rollout_id)) <= 63


@pytest.mark.parametrize(("command", "expected"), [
    (["/opt/venv/bin/python", "-m", "recipes.search.harness"], ["python", "-m", "recipes.search.harness"]),
    (["/usr/bin/python3.11", "-m", "x"], ["python", "-m", "x"]),
    (["python", "-m", "x"], ["python", "-m", "x"]),
    (["/usr/local/bin/my-agent", "--fast"], ["/usr/local/bin/my-agent", "--fast"]),
])
def test_the_controllers_interpreter_becomes_the_images_python(command, expected):
    from controller.runners.manifests import pod_command

    assert pod_command(command) == expected
