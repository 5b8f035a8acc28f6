"""Run one SWE-bench grading Job (`grading_job`) through the Kubernetes API and return its pod's log.

The Job's life (create the Secret and the Job, poll until it ends, read the `grade` container's log, delete both;
API errors, pods the cluster failed and Jobs without a log are `GradingInfraError`) is `recipes.swe.kube_grading`'s,
shared with the `swe` recipe's grading Jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipes.swe.kube_grading import GradingInfraError, GradingRun, KubeJobRunner
from recipes.swe_bench.grading_job import build_grading_job, build_grading_secret

__all__ = ["GradingInfraError", "GradingRun", "KubeGrader"]


class KubeGrader(KubeJobRunner):
    """SWE-bench grading Jobs in the settings' namespace (one blocking call per grade)."""

    def run(self, instance: Mapping[str, Any], model_patch: str, image: str, name: str,
            timeout_s: float) -> GradingRun:
        """Create, wait, read the log, delete."""
        secret = build_grading_secret(instance, model_patch, name, self.settings.namespace)
        job = build_grading_job(instance, image, name, self.settings, timeout_s)
        return self.run_job(secret, job, image, timeout_s)
