"""SWE-bench grading pods (component `grader`) get no network at all, and the grading Job's labels select them."""

from __future__ import annotations

import pytest

from agents.swe_bench.grading_job import build_grading_job
from controller.config import KubernetesSettings
from tests.deploy.support import KUSTOMIZATIONS, named, render


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_grading_pods_have_no_ingress_and_no_egress(kustomization: str) -> None:
    policy = named(render(kustomization), "NetworkPolicy", "harnessrl-grader-isolation")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [] and policy["spec"]["egress"] == []
    instance = {"instance_id": "a__b-1", "base_commit": "c", "repo": "a/b", "test_patch": "", "FAIL_TO_PASS": [],
                "PASS_TO_PASS": []}
    job = build_grading_job(instance, "img:1", "harnessrl-grade-x", KubernetesSettings(), 60)
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
