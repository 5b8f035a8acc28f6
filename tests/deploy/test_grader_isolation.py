"""Grading pods (component `grader`: SWE-bench's and the `swe` recipe's) get no network at all, and both grading Jobs'
labels select them."""

from __future__ import annotations

import pytest

from controller.config import KubernetesSettings
from recipes.swe.grading_job import build_swe_grading_job
from recipes.swe_bench.grading_job import build_grading_job
from tests.deploy.support import KUSTOMIZATIONS, named, render


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_grading_pods_have_no_ingress_and_no_egress(kustomization: str) -> None:
    policy = named(render(kustomization), "NetworkPolicy", "harnessrl-grader-isolation")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [] and policy["spec"]["egress"] == []
    instance = {"instance_id": "a__b-1", "base_commit": "c", "repo": "a/b", "test_patch": "", "FAIL_TO_PASS": [],
                "PASS_TO_PASS": []}
    bench = build_grading_job(instance, "img:1", "harnessrl-grade-x", KubernetesSettings(), 60)
    swe = build_swe_grading_job("tiny-1", "harnessrl-grade-y", KubernetesSettings(), 60, "nonce")
    for job in (bench, swe):
        pod_labels = job["spec"]["template"]["metadata"]["labels"]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
