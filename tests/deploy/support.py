"""Rendering the kustomizations and walking the rendered objects (shared by the deploy tests)."""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
DOCKER = REPO / "deploy" / "docker"
KUSTOMIZATIONS = ("base", "overlays/local", "overlays/postgres")
K8S_VERSION = "1.32"
AGENT_JOB = K8S / "agent-job.yaml"  # the documented shape of the per-rollout Job (not in the base)
# Secrets the base references but does not ship (the operator creates them; overlays/local generates them).
EXTERNAL_SECRETS = {"base": {"harnessrl-tokens", "harnessrl-minio"},
                    "overlays/local": set(),
                    "overlays/postgres": {"harnessrl-tokens", "harnessrl-minio", "harnessrl-gateway-db"}}
WORKLOAD_KINDS = ("Deployment", "Job")


@functools.cache
def render(kustomization: str) -> tuple[dict[str, Any], ...]:
    """The objects `kubectl kustomize deploy/k8s/<kustomization>` renders."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: it renders the kustomizations (install kubectl >= 1.27)")
    done = subprocess.run([kubectl, "kustomize", str(K8S / kustomization)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, f"kubectl kustomize {kustomization} failed: {done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def of_kind(objects: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    """The objects of one kind."""
    return [obj for obj in objects if obj["kind"] == kind]


def named(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    """The object of `kind` called `name`, or `name-<hash>` for ConfigMaps and Secrets kustomize generated."""
    generated = re.compile(re.escape(name) + r"-[a-z0-9]{10}")
    found = [obj for obj in of_kind(objects, kind)
             if obj["metadata"]["name"] == name or generated.fullmatch(obj["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name}, found {[obj['metadata']['name'] for obj in found]}"
    return found[0]


def agent_job() -> dict[str, Any]:
    """The documented agent Job (a fresh copy: callers may change it)."""
    return copy.deepcopy(_agent_job())


@functools.cache
def _agent_job() -> dict[str, Any]:
    """The agent Job parsed once (pure-Python YAML: about 0.1 s a parse, and a property test builds hundreds)."""
    return yaml.safe_load(AGENT_JOB.read_text())


def pod_specs(objects: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner name, pod metadata, pod spec) of every workload, the agent Job template included."""
    workloads = [obj for obj in objects if obj["kind"] in WORKLOAD_KINDS] + [agent_job()]
    for workload in workloads:
        template = workload["spec"]["template"]
        yield workload["metadata"]["name"], template["metadata"], template["spec"]


def containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Init and regular containers of a pod spec."""
    return pod_spec.get("initContainers", []) + pod_spec["containers"]
