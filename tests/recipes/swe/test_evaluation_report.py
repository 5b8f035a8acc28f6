"""Predictions in SWE-bench's JSONL format and the evaluation report from per-instance outcomes (pure)."""

from __future__ import annotations

import json

import pytest

from recipes.swe.evaluation_report import (
    InstanceOutcome,
    OutcomeStatus,
    build_report,
    no_verdict,
    not_runnable,
    outcome_from_grade,
    outcome_from_rollout,
    predictions_of,
)
from recipes.swe.predictions import Prediction, model_label, prediction_lines, read_predictions, write_predictions

PATCH = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def outcome(instance_id: str, repo: str, status: OutcomeStatus, patch: str = "", reason: str | None = None):
    return InstanceOutcome(instance_id=instance_id, repo=repo, status=status, model_patch=patch, reason=reason)


OUTCOMES = [
    outcome("a-1", "o/a", OutcomeStatus.RESOLVED, PATCH),
    outcome("a-2", "o/a", OutcomeStatus.UNRESOLVED, PATCH, "1 FAIL_TO_PASS and 0 PASS_TO_PASS tests fail"),
    outcome("a-3", "o/a", OutcomeStatus.EMPTY_PATCH, reason="the agent changed no file"),
    outcome("b-1", "o/b", OutcomeStatus.RESOLVED, PATCH),
    outcome("b-2", "o/b", OutcomeStatus.AGENT_ERROR, reason="harness timed_out"),
    outcome("b-3", "o/b", OutcomeStatus.INFRA_FAILURE, reason="start_failed; all 3 attempts used"),
    outcome("c-1", "o/c", OutcomeStatus.NOT_RUNNABLE, reason="needs the official SWE-bench image x"),
    outcome("c-2", "o/c", OutcomeStatus.NOT_RUNNABLE, reason="needs the official SWE-bench image y"),
]


def test_predictions_file_is_swe_bench_jsonl_with_exactly_three_keys(tmp_path):
    rows = [Prediction(instance_id="a-1", model_name_or_path="harnessrl/run/step-000003", model_patch=PATCH),
            Prediction(instance_id="a-2", model_name_or_path="harnessrl/run/step-000003", model_patch="")]
    path = write_predictions(rows, tmp_path / "out" / "predictions.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert list(first) == ["instance_id", "model_name_or_path", "model_patch"]
    assert first == {"instance_id": "a-1", "model_name_or_path": "harnessrl/run/step-000003", "model_patch": PATCH}
    assert json.loads(lines[1])["model_patch"] == ""
    assert read_predictions(path) == rows
    assert not list(path.parent.glob(".*.tmp")), "no staging file left behind"


def test_duplicate_predictions_and_bad_lines_are_errors_naming_them(tmp_path):
    row = Prediction(instance_id="a-1", model_name_or_path="m", model_patch="")
    with pytest.raises(ValueError, match="'a-1' has two predictions"):
        prediction_lines([row, row])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row.model_dump()) + "\n" + json.dumps({"instance_id": "x", "model_patch": ""}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is not a SWE-bench prediction"):
        read_predictions(bad)


def test_model_label_names_checkpoints_by_run_and_step():
    assert model_label(checkpoint_uri="file:///store/swe-20260101/step-000004") == "harnessrl/swe-20260101/step-000004"
    assert model_label(checkpoint_uri="s3://harnessrl/checkpoints/run-a/step-000010") == "harnessrl/run-a/step-000010"
    assert model_label(model="smollm2-135m-instruct") == "smollm2-135m-instruct"
    with pytest.raises(ValueError, match="needs a model name or a checkpoint URI"):
        model_label()


def test_report_counts_rates_and_per_repository():
    report = build_report(OUTCOMES, model="m", source="generated", checkpoint_uri="file:///c/r/step-000001")
    assert (report.total, report.submitted, report.resolved) == (8, 6, 2)
    assert report.resolved_rate == pytest.approx(2 / 6) and report.resolved_rate_of_total == pytest.approx(2 / 8)
    assert (report.unresolved, report.empty_patches, report.errors, report.infra_failures, report.not_runnable) == \
        (1, 1, 1, 1, 2)
    assert report.resolved_ids == ["a-1", "b-1"] and report.unresolved_ids == ["a-2"]
    assert report.empty_patch_ids == ["a-3"]
    assert report.error_reasons == {"b-2": "harness timed_out"}
    assert report.infra_failure_reasons == {"b-3": "start_failed; all 3 attempts used"}
    assert report.not_runnable_reasons == {"c-1": "needs the official SWE-bench image x",
                                           "c-2": "needs the official SWE-bench image y"}
    a, b, c = (report.per_repository[repo] for repo in ("o/a", "o/b", "o/c"))
    assert (a.total, a.submitted, a.resolved, a.resolved_rate) == (3, 3, 1, pytest.approx(1 / 3))
    assert (b.total, b.submitted, b.resolved) == (3, 3, 1)
    assert (c.total, c.submitted, c.resolved, c.resolved_rate) == (2, 0, 0, 0.0)


def test_report_metrics_and_markdown_name_every_category():
    report = build_report(OUTCOMES, model="m", source="generated")
    metrics = report.metrics()
    assert metrics["resolved_rate"] == pytest.approx(2 / 6) and metrics["not_runnable"] == 2.0
    assert metrics["resolved_rate/o/a"] == pytest.approx(1 / 3) and "resolved_rate/o/c" not in metrics
    assert all(isinstance(value, float) for value in metrics.values())
    markdown = report.to_markdown()
    assert "**2 / 6 run here (33.3%)**" in markdown and "2 / 8 asked for (25.0%)" in markdown
    for text in ("| o/a | 3 | 3 | 1 | 33.3% |", "## Unresolved (1)", "- `a-2`", "## Empty patches (1)",
                 "`b-2`: harness timed_out", "## Not runnable here (2)", "`c-1`: needs the official SWE-bench image x",
                 "checkpoint: `none (a model)`"):
        assert text in markdown, text


def test_report_with_nothing_run_has_zero_rates_and_duplicates_are_errors():
    report = build_report(OUTCOMES[-2:], model="m", source="SWE-bench/SWE-bench_Verified")
    assert (report.total, report.submitted, report.resolved_rate, report.resolved_rate_of_total) == (2, 0, 0.0, 0.0)
    assert build_report([], model="m", source="x").total == 0
    with pytest.raises(ValueError, match=r"\['a-1'\] have more than one outcome"):
        build_report([OUTCOMES[0], OUTCOMES[0]], model="m", source="x")


def test_outcome_from_grade_follows_the_grader_details():
    resolved = outcome_from_grade("i", "o/a", {"resolved": True, "model_patch": PATCH})
    assert (resolved.status, resolved.model_patch) == (OutcomeStatus.RESOLVED, PATCH)
    failing = outcome_from_grade("i", "o/a", {"resolved": False, "model_patch": PATCH,
                                              "fail_to_pass_failed": ["t::a", "t::b"], "pass_to_pass_failed": []})
    assert failing.status == OutcomeStatus.UNRESOLVED
    assert failing.reason == "2 FAIL_TO_PASS and 0 PASS_TO_PASS tests fail"
    broken = outcome_from_grade("i", "o/a", {"resolved": False, "model_patch": PATCH, "patch_error": "hunk 1 fails"})
    assert broken.status == OutcomeStatus.UNRESOLVED and "does not apply: hunk 1 fails" in broken.reason
    only_new = outcome_from_grade("i", "o/a", {"resolved": False, "model_patch": PATCH, "empty_patch": True,
                                               "dropped_files": ["notes.txt"]})
    assert only_new.status == OutcomeStatus.UNRESOLVED and "not applied: notes.txt" in only_new.reason
    for details in ({"resolved": False, "model_patch": ""}, {"resolved": False, "model_patch": " \n"},
                    {"resolved": False, "error": "the agent's repository /w/repo is missing"}):
        assert outcome_from_grade("i", "o/a", details).status == OutcomeStatus.EMPTY_PATCH, details
    too_large = outcome_from_grade("i", "o/a", {"resolved": False, "model_patch": None, "patch_chars": 2_000_000})
    assert too_large.status == OutcomeStatus.UNRESOLVED and "2000000 chars" in too_large.reason


def test_outcome_from_rollout_maps_states_and_failure_kinds():
    graded = {"resolved": True, "model_patch": PATCH}
    assert outcome_from_rollout("i", "r", state="succeeded", failure_kind=None, error=None,
                                reward_details=graded).status == OutcomeStatus.RESOLVED
    silent = outcome_from_rollout("i", "r", state="succeeded", failure_kind=None, error=None, reward_details=None)
    assert silent.status == OutcomeStatus.INFRA_FAILURE and "no reward" in silent.reason
    agent = outcome_from_rollout("i", "r", state="failed", failure_kind="agent", error="harness timed_out",
                                 reward_details=None)
    assert (agent.status, agent.reason, agent.model_patch) == (OutcomeStatus.AGENT_ERROR, "harness timed_out", "")
    infra = outcome_from_rollout("i", "r", state="failed", failure_kind="infra", error="evicted", reward_details=None)
    assert (infra.status, infra.reason) == (OutcomeStatus.INFRA_FAILURE, "evicted")
    cancelled = outcome_from_rollout("i", "r", state="cancelled", failure_kind=None, error=None, reward_details=None)
    assert cancelled.status == OutcomeStatus.INFRA_FAILURE and "'cancelled'" in cancelled.reason
    assert no_verdict("i", "r", "timeout").status == OutcomeStatus.INFRA_FAILURE


def test_predictions_cover_every_instance_run_here_and_none_not_runnable():
    predictions = predictions_of(OUTCOMES, "m")
    assert [p.instance_id for p in predictions] == ["a-1", "a-2", "a-3", "b-1", "b-2", "b-3"]
    assert {p.model_name_or_path for p in predictions} == {"m"}
    assert [p.model_patch for p in predictions[:3]] == [PATCH, PATCH, ""]
    assert predictions_of([not_runnable("x", "r", "why")], "m") == []
