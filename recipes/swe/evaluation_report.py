"""The SWE-bench evaluation report, built from per-instance outcomes (pure).

Each instance ends in exactly one status, as in SWE-bench's report: resolved; unresolved (a non-empty patch graded and
not resolving); empty patch (the agent changed nothing: never counted as resolved); agent error (the harness failed,
timed out or crashed); infra failure (the run never produced a verdict: infrastructure, all retries used); not
runnable (no environment for it here, with the reason). `resolved_rate` is over the instances run here (all but the
not-runnable ones), `resolved_rate_of_total` over every instance asked for.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from recipes.swe.predictions import Prediction

LISTED_IDS = 100  # ids per category shown in the markdown report (the JSON report has all)
_METRIC_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-./ ]")


class OutcomeStatus(StrEnum):
    """How one instance ended."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    EMPTY_PATCH = "empty_patch"
    AGENT_ERROR = "agent_error"
    INFRA_FAILURE = "infra_failure"
    NOT_RUNNABLE = "not_runnable"


class InstanceOutcome(BaseModel):
    """One instance's result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str = Field(description="The instance id.")
    repo: str = Field(description="The instance's repository (`owner/name`).")
    status: OutcomeStatus = Field(description="How it ended.")
    model_patch: str = Field(default="", description="The agent's diff ('' when none was recorded).")
    reason: str | None = Field(default=None, description="Why it is not resolved, for humans.")


class RepoCounts(BaseModel):
    """Counts of one repository."""

    total: int = Field(description="Instances of the repository asked for.")
    submitted: int = Field(description="Instances run here (not the not-runnable ones).")
    resolved: int = Field(description="Resolved instances.")
    resolved_rate: float = Field(description="resolved / submitted (0 when nothing ran).")


class EvaluationReport(BaseModel):
    """What an evaluation found, in SWE-bench's categories."""

    model: str = Field(description="model_name_or_path of the predictions.")
    checkpoint_uri: str | None = Field(default=None, description="The evaluated checkpoint (none: a model).")
    source: str = Field(description="Where the instances came from (a hub id, a path, or 'generated').")
    total: int = Field(description="Instances asked for.")
    submitted: int = Field(description="Instances run here.")
    resolved: int = Field(description="Resolved instances.")
    resolved_rate: float = Field(description="resolved / submitted (0 when nothing ran).")
    resolved_rate_of_total: float = Field(description="resolved / total (0 when there were no instances).")
    unresolved: int = Field(description="Graded, not resolved.")
    empty_patches: int = Field(description="The agent produced no diff.")
    errors: int = Field(description="Agent failures (crash, timeout, non-zero exit).")
    infra_failures: int = Field(description="No verdict because of the infrastructure.")
    not_runnable: int = Field(description="No environment here (see not_runnable_reasons).")
    per_repository: dict[str, RepoCounts] = Field(description="Counts by repository.")
    resolved_ids: list[str] = Field(description="Resolved instance ids.")
    unresolved_ids: list[str] = Field(description="Unresolved instance ids.")
    empty_patch_ids: list[str] = Field(description="Instance ids with an empty patch.")
    error_reasons: dict[str, str] = Field(description="Agent failures: id -> reason.")
    infra_failure_reasons: dict[str, str] = Field(description="Infra failures: id -> reason.")
    not_runnable_reasons: dict[str, str] = Field(description="Not runnable here: id -> reason.")

    def metrics(self) -> dict[str, float]:
        """Numbers for a tracker: the counts, the rates, and `resolved_rate/<repo>` per repository."""
        counts = {key: float(getattr(self, key)) for key in ("total", "submitted", "resolved", "unresolved",
                                                             "empty_patches", "errors", "infra_failures",
                                                             "not_runnable")}
        per_repo = {f"resolved_rate/{_METRIC_KEY_BAD.sub('_', repo)}": c.resolved_rate
                    for repo, c in self.per_repository.items() if c.submitted}
        return {"resolved_rate": self.resolved_rate, "resolved_rate_of_total": self.resolved_rate_of_total,
                **counts, **per_repo}

    def to_markdown(self) -> str:
        """The report for humans (MLflow and Prefect artifacts)."""
        lines = [f"# SWE-bench evaluation of `{self.model}`", "",
                 f"- source: `{self.source}`", f"- checkpoint: `{self.checkpoint_uri or 'none (a model)'}`",
                 f"- resolved: **{self.resolved} / {self.submitted} run here ({self.resolved_rate:.1%})**, "
                 f"{self.resolved} / {self.total} asked for ({self.resolved_rate_of_total:.1%})", "",
                 "| status | instances |", "|---|---|"]
        lines += [f"| {name} | {getattr(self, key)} |" for name, key in (
            ("resolved", "resolved"), ("unresolved", "unresolved"), ("empty patch", "empty_patches"),
            ("agent error", "errors"), ("infra failure", "infra_failures"), ("not runnable here", "not_runnable"))]
        lines += ["", "## Per repository", "", "| repository | total | run | resolved | rate |",
                  "|---|---|---|---|---|"]
        lines += [f"| {repo} | {c.total} | {c.submitted} | {c.resolved} | {c.resolved_rate:.1%} |"
                  for repo, c in sorted(self.per_repository.items())]
        lines += _id_section("Unresolved", self.unresolved_ids)
        lines += _id_section("Empty patches", self.empty_patch_ids)
        lines += _reason_section("Agent errors", self.error_reasons)
        lines += _reason_section("Infra failures", self.infra_failure_reasons)
        lines += _reason_section("Not runnable here", self.not_runnable_reasons)
        return "\n".join(lines) + "\n"


def _listed(items: Sequence[str]) -> list[str]:
    shown = list(items[:LISTED_IDS])
    if len(items) > LISTED_IDS:
        shown.append(f"... and {len(items) - LISTED_IDS} more (report.json lists all)")
    return shown


def _id_section(title: str, ids: Sequence[str]) -> list[str]:
    if not ids:
        return []
    return ["", f"## {title} ({len(ids)})", ""] + [f"- {item}" for item in _listed([f"`{i}`" for i in ids])]


def _reason_section(title: str, reasons: Mapping[str, str]) -> list[str]:
    if not reasons:
        return []
    items = [f"`{key}`: {value}" for key, value in reasons.items()]
    return ["", f"## {title} ({len(reasons)})", ""] + [f"- {item}" for item in _listed(items)]


def _rate(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def build_report(outcomes: Iterable[InstanceOutcome], *, model: str, source: str,
                 checkpoint_uri: str | None = None) -> EvaluationReport:
    """The report of these outcomes (one per instance; a duplicate id is an error)."""
    outcomes = list(outcomes)
    ids = Counter(o.instance_id for o in outcomes)
    duplicated = sorted(i for i, n in ids.items() if n > 1)
    if duplicated:
        raise ValueError(f"instances {duplicated[:5]} have more than one outcome; report each instance once")
    by_status = {status: [o for o in outcomes if o.status == status] for status in OutcomeStatus}
    total, not_runnable = len(outcomes), len(by_status[OutcomeStatus.NOT_RUNNABLE])
    resolved = len(by_status[OutcomeStatus.RESOLVED])
    return EvaluationReport(
        model=model, checkpoint_uri=checkpoint_uri, source=source, total=total, submitted=total - not_runnable,
        resolved=resolved, resolved_rate=_rate(resolved, total - not_runnable),
        resolved_rate_of_total=_rate(resolved, total), unresolved=len(by_status[OutcomeStatus.UNRESOLVED]),
        empty_patches=len(by_status[OutcomeStatus.EMPTY_PATCH]), errors=len(by_status[OutcomeStatus.AGENT_ERROR]),
        infra_failures=len(by_status[OutcomeStatus.INFRA_FAILURE]), not_runnable=not_runnable,
        per_repository=_per_repository(outcomes),
        resolved_ids=[o.instance_id for o in by_status[OutcomeStatus.RESOLVED]],
        unresolved_ids=[o.instance_id for o in by_status[OutcomeStatus.UNRESOLVED]],
        empty_patch_ids=[o.instance_id for o in by_status[OutcomeStatus.EMPTY_PATCH]],
        error_reasons=_reasons(by_status[OutcomeStatus.AGENT_ERROR]),
        infra_failure_reasons=_reasons(by_status[OutcomeStatus.INFRA_FAILURE]),
        not_runnable_reasons=_reasons(by_status[OutcomeStatus.NOT_RUNNABLE]))


def _reasons(outcomes: Sequence[InstanceOutcome]) -> dict[str, str]:
    return {o.instance_id: o.reason or "no reason recorded" for o in outcomes}


def _per_repository(outcomes: Sequence[InstanceOutcome]) -> dict[str, RepoCounts]:
    counts: dict[str, RepoCounts] = {}
    for repo in sorted({o.repo for o in outcomes}):
        mine = [o for o in outcomes if o.repo == repo]
        submitted = sum(o.status != OutcomeStatus.NOT_RUNNABLE for o in mine)
        resolved = sum(o.status == OutcomeStatus.RESOLVED for o in mine)
        counts[repo] = RepoCounts(total=len(mine), submitted=submitted, resolved=resolved,
                                  resolved_rate=_rate(resolved, submitted))
    return counts


def outcome_from_grade(instance_id: str, repo: str, details: Mapping[str, Any]) -> InstanceOutcome:
    """The outcome of a graded patch, from the SWE grader's details (`resolved`, `model_patch`, the broken tests)."""
    patch = details.get("model_patch")
    if patch is None and details.get("patch_chars"):
        reason = f"the agent's diff ({details['patch_chars']} chars) was too large to record with the grade"
        status = OutcomeStatus.RESOLVED if details.get("resolved") else OutcomeStatus.UNRESOLVED
        return InstanceOutcome(instance_id=instance_id, repo=repo, status=status, reason=reason)
    patch = patch or ""
    if not patch.strip():
        return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.EMPTY_PATCH,
                               reason=details.get("error") or "the agent changed no file")
    if details.get("resolved"):
        return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.RESOLVED, model_patch=patch)
    return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.UNRESOLVED, model_patch=patch,
                           reason=_unresolved_reason(details))


def _unresolved_reason(details: Mapping[str, Any]) -> str:
    if details.get("patch_error"):
        return f"the patch does not apply: {details['patch_error']}"
    if details.get("error"):
        return str(details["error"])
    if details.get("empty_patch"):
        dropped = details.get("dropped_files") or []
        return "nothing in the diff was graded" + (f" (new files not applied: {', '.join(dropped[:5])})"
                                                    if dropped else "")
    f2p, p2p = details.get("fail_to_pass_failed") or [], details.get("pass_to_pass_failed") or []
    return f"{len(f2p)} FAIL_TO_PASS and {len(p2p)} PASS_TO_PASS tests fail"


def outcome_from_rollout(instance_id: str, repo: str, *, state: str, failure_kind: str | None, error: str | None,
                         reward_details: Mapping[str, Any] | None) -> InstanceOutcome:
    """The outcome of a finished val-mode rollout: its state, failure kind and the reward event's details."""
    if state == "succeeded":
        if reward_details is None:
            return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.INFRA_FAILURE,
                                   reason="the rollout succeeded but no reward was posted (grader not run?)")
        return outcome_from_grade(instance_id, repo, reward_details)
    patch = str((reward_details or {}).get("model_patch") or "")
    if state == "failed" and failure_kind == "agent":
        return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.AGENT_ERROR,
                               model_patch=patch, reason=error or "the harness failed")
    reason = error or f"the rollout ended in state {state!r}"
    return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.INFRA_FAILURE,
                           model_patch=patch, reason=reason)


def no_verdict(instance_id: str, repo: str, reason: str) -> InstanceOutcome:
    """An instance whose rollout did not finish (an infra failure: the infrastructure gave no verdict)."""
    return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.INFRA_FAILURE, reason=reason)


def not_runnable(instance_id: str, repo: str, reason: str) -> InstanceOutcome:
    """An instance with no environment here."""
    return InstanceOutcome(instance_id=instance_id, repo=repo, status=OutcomeStatus.NOT_RUNNABLE, reason=reason)


def predictions_of(outcomes: Iterable[InstanceOutcome], model: str) -> list[Prediction]:
    """One SWE-bench prediction per instance run here (not-runnable instances have none)."""
    return [Prediction(instance_id=o.instance_id, model_name_or_path=model, model_patch=o.model_patch)
            for o in outcomes if o.status != OutcomeStatus.NOT_RUNNABLE]
