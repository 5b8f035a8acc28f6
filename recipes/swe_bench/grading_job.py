"""Pure builders of a SWE-bench grading Job: a fresh pod of the instance image that applies the model patch and the
test patch and runs the instance's tests (`eval_script`); its log is the verdict's input.

The model patch, the test patch and the script travel in a Secret (`harnessrl-grade-<hash>`, the controller may
already manage Secrets; Kubernetes caps one at 1 MiB), mounted read-only at GRADE_DIR. The pod has no API token and
no retries, a deadline and a TTL; its labels (component `grader`) keep it out of the agent runner's selector. The
names, labels and the Secret's limit are shared with the `swe` recipe's grading Job (`recipes.swe.grading_job`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from controller.config import KubernetesSettings
from recipes.swe.grading_job import (
    GRADE_CONTAINER,
    GRADER_COMPONENT,
    INSTANCE_LABEL,
    MAX_SECRET_BYTES,
    GradingInputTooLarge,
    grading_labels,
    grading_name,
)
from recipes.swe_bench.eval_script import GRADE_DIR, eval_script

__all__ = ["GRADE_CONTAINER", "GRADER_COMPONENT", "INSTANCE_LABEL", "MAX_SECRET_BYTES", "GradingInputTooLarge",
           "build_grading_job", "build_grading_secret", "grading_labels", "grading_name"]


def build_grading_secret(instance: Mapping[str, Any], model_patch: str, name: str, namespace: str) -> dict[str, Any]:
    """The Secret holding model.patch, test.patch and eval.sh; GradingInputTooLarge past Kubernetes' limit."""
    data = {"model.patch": model_patch, "test.patch": str(instance["test_patch"]), "eval.sh": eval_script(instance)}
    size = sum(len(value.encode()) for value in data.values())
    if size > MAX_SECRET_BYTES:
        raise GradingInputTooLarge(f"the patches of {instance['instance_id']!r} take {size} bytes, over the "
                                   f"{MAX_SECRET_BYTES} a Secret holds; the model patch is too large to grade")
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": grading_labels(str(instance["instance_id"]))},
            "type": "Opaque", "stringData": data}


def build_grading_job(instance: Mapping[str, Any], image: str, name: str, settings: KubernetesSettings,
                      timeout_s: float) -> dict[str, Any]:
    """The batch/v1 Job running eval.sh in `image` once: no retries, a hard deadline, a TTL, no token."""
    labels = grading_labels(str(instance["instance_id"]))
    amount = {"cpu": settings.cpu, "memory": settings.memory}
    container = {"name": GRADE_CONTAINER, "image": image, "imagePullPolicy": settings.image_pull_policy,
                 "command": ["/bin/bash", f"{GRADE_DIR}/eval.sh"],
                 "volumeMounts": [{"name": "grade", "mountPath": GRADE_DIR, "readOnly": True}],
                 "resources": {"requests": dict(amount), "limits": dict(amount)},
                 "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
    pod = {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container],
           "volumes": [{"name": "grade", "secret": {"secretName": name}}]}
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": settings.namespace, "labels": labels},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": max(1, math.ceil(timeout_s)),
                     "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}
