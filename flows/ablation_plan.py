"""Pure planning of an ablation: arms (named config overrides) x seeds of training runs, the same training tasks for
every arm of a seed, one validation set for every run.

Arms are data, so the rollout-level ablation of the Agent Lightning v1.0 report (`REPORT_ARMS`) and a learning-rate
sweep with an lr = 0 control are the same flow with other arms (`parse_arms`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VAL_SEED = 1_000_003
"""Seed of the one validation set every run of an ablation is scored on (far from the training seeds)."""


@dataclass(frozen=True)
class Arm:
    """One arm: a name (a tag value and part of run names) and the dotted-key overrides it applies."""

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    reference: float | None = None
    """The published number for this arm, if any (the report's step-128 SWE accuracy, in %)."""


REPORT_ARMS: tuple[Arm, ...] = (
    Arm("rollout-adv+rollout-token-mean",
        {"algorithm.advantage.level": "rollout", "backend.loss.agg_mode": "rollout-token-mean"}, 38.2),
    Arm("sample-adv+token-mean",
        {"algorithm.advantage.level": "sample", "backend.loss.agg_mode": "token-mean"}, 35.0),
    Arm("rollout-adv+token-mean",
        {"algorithm.advantage.level": "rollout", "backend.loss.agg_mode": "token-mean"}, 33.1),
)
"""The three arms of the Agent Lightning v1.0 report ("Towards Harnessed Agentic RL"), with its step-128 SWE numbers."""

DEFAULT_SEEDS = (0, 1, 2, 3, 4)

LEARNING_ARMS: tuple[Arm, ...] = (Arm("trained"), Arm("lr0", {"backend.optimizer.lr": 0.0}))
"""A learning experiment: the profile as it is, and its lr = 0 control (the same rollouts, validation and data, no
weight change); `benchmarks/learning_report.py` compares them with step 0 of each run."""
RERUN_ARM = Arm("trained-rerun")
"""The trained configuration again (the same overrides as `trained`): the spread of a rerun beside the effect."""
ABLATION_ARMS: tuple[Arm, ...] = (*REPORT_ARMS, LEARNING_ARMS[1])
"""The flow's default: the report's three arms and the lr = 0 control (the profile's rollout-level defaults, no
weight change), so that the page can say whether any arm learned at all."""
NAMED_ARMS: dict[str, tuple[Arm, ...]] = {"report": REPORT_ARMS, "report+lr0": ABLATION_ARMS,
                                          "learning": LEARNING_ARMS,
                                          "learning+rerun": (LEARNING_ARMS[0], RERUN_ARM, LEARNING_ARMS[1]),
                                          "rerun": (RERUN_ARM,)}
"""Arm sets by name (`python -m flows.ablation --arms NAME`); `rerun` alone adds the rerun to an experiment run
before, under a name of its own (its report joins both with `learning_report.py --load-data`)."""


@dataclass(frozen=True)
class PlannedRun:
    """One training run of the ablation."""

    arm: Arm
    seed: int
    name: str
    overrides: dict[str, Any]


def parse_arms(arms: Sequence[Mapping[str, Any]] | None) -> tuple[Arm, ...]:
    """Arms from flow parameters (`[{"name": ..., "overrides": {...}, "reference": ...}]`); None: ABLATION_ARMS."""
    if arms is None:
        return ABLATION_ARMS
    parsed = tuple(Arm(str(a["name"]), dict(a.get("overrides") or {}), a.get("reference")) for a in arms)
    names = [arm.name for arm in parsed]
    if not parsed or len(set(names)) != len(names):
        raise ValueError(f"arms must be a non-empty list with unique names, got {names}")
    for arm in parsed:
        if not arm.name.replace("-", "").replace("+", "").replace(".", "").replace("_", "").isalnum():
            raise ValueError(f"arm name {arm.name!r}: use letters, digits and - + . _ (it is part of run names)")
    return parsed


def named_arms(name: str) -> list[dict[str, Any]]:
    """The arm set `name` (`NAMED_ARMS`) as flow parameters; ValueError naming the known sets."""
    if name not in NAMED_ARMS:
        raise ValueError(f"no arm set {name!r}: use one of {sorted(NAMED_ARMS)} or a JSON file of arms")
    return [{"name": arm.name, "overrides": dict(arm.overrides), "reference": arm.reference}
            for arm in NAMED_ARMS[name]]


def run_name(ablation: str, arm: Arm, seed: int) -> str:
    """The run's name (also its resume key): `{ablation}-{arm with + as _}-s{seed}`."""
    return f"{ablation}-{arm.name.replace('+', '_')}-s{seed}"


def plan_runs(ablation: str, arms: Sequence[Arm], seeds: Sequence[int], base: Mapping[str, Any],
              data_for_seed: Mapping[int, Mapping[str, Any]]) -> list[PlannedRun]:
    """Seed-major (every arm of seed 0, then seed 1, ...: a partial ablation is still paired): each run's overrides
    are `base`, then the seed's data settings, then the arm's, then its name."""
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct integers, got {list(seeds)}")
    runs = []
    for seed in seeds:
        for arm in arms:
            name = run_name(ablation, arm, seed)
            runs.append(PlannedRun(arm, seed, name, {**base, **data_for_seed[seed], **arm.overrides, "name": name}))
    return runs


def task_family(row: Mapping[str, Any]) -> str:
    """What a training task and a validation task must not share: the row's `family` when its recipe gives one (tasks
    with one answer: one SWE bug stated at two ladder levels), else its id."""
    return str(row.get("family") or row["id"])


def seed_data_overrides(task_file: str, val_file: str, seed: int, train_count: int,
                        val_count: int) -> dict[str, Any]:
    """The data settings of one seed's runs: its training tasks' file and the shared validation file (no split)."""
    return {"data.source": task_file, "data.val_source": val_file, "data.seed": seed, "data.train_tasks": train_count,
            "data.val_tasks": val_count}
