"""Where evaluation instances run (local store vs official images, with reasons) and grading predictions through the
SWE grader: the gold patch resolves, an empty one is an empty patch, a wrong one is unresolved."""

from __future__ import annotations

import pytest

from recipes.swe.environments import instance_image
from recipes.swe.evaluation import (
    grade_predictions,
    plan_evaluation,
    rollout_tasks,
)
from recipes.swe.evaluation_report import OutcomeStatus, build_report
from recipes.swe.grader import grade_patch
from recipes.swe.instances import normalize_rows
from recipes.swe.predictions import Prediction, read_predictions, write_predictions


def verified_row(instance_id: str, image_name: str | None = None) -> dict:
    """A normalised SWE-bench Verified instance (no local environment)."""
    return {"instance_id": instance_id, "source": "swe-bench-verified", "repo": "astropy/astropy",
            "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607", "problem_statement": "broken",
            "FAIL_TO_PASS": ["t::a"], "PASS_TO_PASS": [], "image_name": image_name, "bug_patch": None,
            "fix_patch": "diff", "test_patch": "diff", "created_at": None, "version": "4.3",
            "environment_setup_commit": None}


def test_image_of_names_the_official_image_or_none_for_local_instances(tiny_store):
    store, instances = tiny_store
    (local,) = normalize_rows(instances[:1], "swe-smith")
    assert instance_image(local) is None
    assert instance_image(verified_row("astropy__astropy-12907")) == \
        "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert instance_image(verified_row("x", image_name="registry.local/x:1")) == "registry.local/x:1"


def test_plan_runs_store_instances_locally_and_reports_the_rest_with_reasons(tiny_store):
    store, instances = tiny_store
    local = normalize_rows(instances, "swe-smith")
    missing = {**local[0], "instance_id": "local__tinymath.00000000.gone__deadbeef"}
    rows = [verified_row("astropy__astropy-12907"), *local, missing]
    plan = plan_evaluation(rows, store, "local")
    assert [i["instance_id"] for i in plan.local] == [i["instance_id"] for i in instances]
    reasons = {o.instance_id: o.reason for o in plan.not_runnable}
    assert set(reasons) == {"astropy__astropy-12907", missing["instance_id"]}
    assert all(o.status == OutcomeStatus.NOT_RUNNABLE for o in plan.not_runnable)
    assert "sweb.eval.x86_64.astropy_1776_astropy-12907" in reasons["astropy__astropy-12907"]
    assert "no cluster is configured here (controller.runner is 'local'" in reasons["astropy__astropy-12907"]
    assert "local environment is missing" in reasons[missing["instance_id"]]
    on_cluster = plan_evaluation(rows, store, "kubernetes")
    assert [i["instance_id"] for i in on_cluster.kubernetes] == ["astropy__astropy-12907"]
    assert [o.instance_id for o in on_cluster.not_runnable] == [missing["instance_id"]]
    assert len(on_cluster.local) == len(instances) and plan.kubernetes == ()


def test_rollout_tasks_carry_no_fix_and_name_the_recipe(tiny_store):
    store, instances = tiny_store
    (task,) = rollout_tasks(normalize_rows(instances[:1], "swe-smith"), store)
    assert set(task) == {"id", "problem_statement", "store", "level", "family", "recipe"}
    assert task["recipe"] == "swe" and task["id"] == instances[0]["instance_id"]


def test_grade_details_carry_the_model_patch(tiny_store):
    store, instances = tiny_store
    (normalised,) = normalize_rows(instances[:1], "swe-smith")
    grade = grade_patch(store, instances[0], normalised["fix_patch"])
    assert grade.reward == 1.0 and grade.details["model_patch"] == normalised["fix_patch"]


def test_gold_predictions_resolve_through_the_grader_and_report(tiny_store, tmp_path):
    store, instances = tiny_store
    normalised = normalize_rows(instances, "swe-smith")
    gold = [Prediction(instance_id=i["instance_id"], model_name_or_path="gold", model_patch=i["fix_patch"])
            for i in normalised]
    path = write_predictions(gold, tmp_path / "gold.jsonl")
    outcomes = grade_predictions(store, read_predictions(path))
    report = build_report(outcomes, model="gold", source="generated")
    assert report.resolved == len(instances) and report.resolved_rate == 1.0, report.to_markdown()
    assert [o.model_patch for o in outcomes] == [i["fix_patch"] for i in normalised]


def test_empty_and_wrong_predictions_are_not_resolved(tiny_store):
    store, instances = tiny_store
    first, second = normalize_rows(instances[:2], "swe-smith")
    outcomes = grade_predictions(store, [
        Prediction(instance_id=first["instance_id"], model_name_or_path="m", model_patch=""),
        # the bug again: it does not apply to the checkout that already has it
        Prediction(instance_id=second["instance_id"], model_name_or_path="m", model_patch=second["bug_patch"])])
    assert [o.status for o in outcomes] == [OutcomeStatus.EMPTY_PATCH, OutcomeStatus.UNRESOLVED]
    assert "does not apply" in outcomes[1].reason



def test_predictions_of_unknown_instances_are_refused_naming_them(tiny_store):
    store, _ = tiny_store
    with pytest.raises(KeyError, match="'astropy__astropy-12907': not in"):
        grade_predictions(store, [Prediction(instance_id="astropy__astropy-12907", model_name_or_path="m",
                                             model_patch="diff")])
