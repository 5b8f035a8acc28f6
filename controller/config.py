"""The controller's typed configuration: from YAML and/or keyword overrides; unknown keys are errors."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from controller.settings_file import read_settings


def _default_controller_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class KubernetesSettings(BaseModel):
    """Where and how agent Jobs run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="harnessrl", description="Namespace of the agent Jobs and key Secrets.")
    image: str = Field(default="harnessrl/agent:latest", description="Agent image that holds the recipes' harnesses.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(default="IfNotPresent",
                                                                         description="Pull policy of the agent image.")
    cpu: str = Field(default="1", description="CPU request and limit of an agent container.")
    memory: str = Field(default="2Gi", description="Memory request and limit of an agent container.")
    ephemeral_storage: str = Field(default="10Gi", description=(
        "Ephemeral-storage request and limit of an agent container and the size limit of its working directory: "
        "a pod past it is evicted, which counts as the agent's failure (limit_exceeded), not a retry."))
    service_account: str | None = Field(default=None, description="Service account of agent pods (none: default).")
    ttl_after_finished_s: int = Field(default=600, ge=0, description="Kubernetes deletes a finished Job after this.")
    creates_per_s: float = Field(default=5.0, gt=0, description="Most Job creations per second (token bucket rate).")
    create_burst: int = Field(default=10, ge=1, description="Job creations allowed back to back.")
    kubeconfig: str | None = Field(default=None, description="Kubeconfig path; none: in-cluster, then ~/.kube/config.")
    api_url: str | None = Field(default=None, description="API server URL without auth (tests, kubectl proxy).")
    image_pull_grace_s: float = Field(default=120.0, gt=0,
                                      description="Longest wait on an image pull error before an infra failure.")


class ControllerConfig(BaseModel):
    """Settings of one controller process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gateway_url: str = Field(default="http://127.0.0.1:8100", pattern=r"^https?://",
                             description="Gateway admin API base URL.")
    controller_id: str = Field(default_factory=_default_controller_id, min_length=1,
                               description="Lease owner name; unique per controller process.")
    runner: Literal["local", "kubernetes"] = Field(default="local", description="Where harnesses run.")
    concurrency: int = Field(default=8, ge=1, description="Most attempts running at once.")
    recipe: str | None = Field(default=None, description="Recipe for every rollout; none: the task's 'recipe' key.")
    lease_s: float = Field(default=60.0, gt=0, description="Lease asked for at claim and renewal.")
    renew_every_s: float = Field(default=20.0, gt=0, description="Lease renewal period (well under lease_s).")
    poll_interval_s: float = Field(default=1.0, gt=0, description="Reconcile tick period.")
    harness_timeout_s: float = Field(default=1800.0, gt=0, description="Wall-clock limit of one harness attempt.")
    kill_grace_s: float = Field(default=5.0, ge=0, description="SIGTERM to SIGKILL delay when a harness is stopped.")
    grade_workers: int = Field(default=2, ge=1, description="Threads grading and reporting ended attempts.")
    work_dir: Path = Field(default=Path("harnessrl-work"), description="Parent of the attempts' working directories.")
    logs_dir: Path = Field(default=Path("harnessrl-logs"), description="Parent of the attempts' stdout/stderr files.")
    keep_workdirs: bool = Field(default=False, description="Keep working directories after grading (debugging).")
    harness_env: dict[str, str] = Field(default_factory=dict, description="Extra variables given to every harness.")
    harness_network: Literal["gateway", "host"] = Field(
        default="gateway", description="LocalRunner harnesses' network: only their rollout's gateway path, or 'host' "
        "(the network allowed: weakens the network and nothing else; the store, the project and secrets stay out).")
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings, description="KubernetesRunner settings.")


def load_controller_config(path: str | Path | None = None, **overrides: Any) -> ControllerConfig:
    """Read a YAML file (optional), apply non-None overrides, validate."""
    data = read_settings(path, overrides, "controller settings")
    config = ControllerConfig(**data)
    if config.renew_every_s >= config.lease_s:
        raise ValueError(f"renew_every_s={config.renew_every_s} must be below lease_s={config.lease_s}, "
                         "or leases expire between renewals; lower renew_every_s (a third of lease_s is usual)")
    return config
