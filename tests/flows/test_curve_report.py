"""benchmarks/curve_report.py: per-step curves, paired changes from step 0 and from the control, on synthetic runs."""

from __future__ import annotations

import math

import pytest

from benchmarks.ablation_report import t_interval
from benchmarks.curve_report import (
    BATCH,
    END,
    KL,
    START,
    VAL,
    by_step,
    curves_from_json,
    curves_to_json,
    final_step,
    main,
    render,
    with_report,
)

T_975_DF2 = 4.302652729749462  # Student t quantile 0.975 with 2 degrees of freedom


def run(val: dict[int, float], kl: dict[int, float] | None = None, batch: dict[int, float] | None = None) -> dict:
    return {VAL: val, KL: kl or {}, BATCH: batch or {}}


CURVES = {
    "lr0": {0: run({0: 0.20, 2: 0.21}, {1: 0.001, 2: 0.002}),
            1: run({0: 0.30, 2: 0.29}, {1: 0.003, 2: 0.0}),
            2: run({0: 0.25, 2: 0.25}, {1: 0.002, 2: 0.001})},
    "lr1e-4": {0: run({0: 0.22, 2: 0.40}, {1: 0.20, 2: 0.05}, {1: 0.3, 2: 0.5}),
               1: run({0: 0.28, 2: 0.45}, {1: 0.10, 2: 0.03}, {1: 0.1, 2: 0.3}),
               2: run({0: 0.26, 2: 0.35}, {1: 0.30, 2: 0.04}, {1: 0.2, 2: 0.4})},
}


def test_by_step_gathers_every_seed_of_a_step_and_final_step_is_the_last_validated():
    assert by_step(CURVES, "lr1e-4", VAL) == {0: {0: 0.22, 1: 0.28, 2: 0.26}, 2: {0: 0.40, 1: 0.45, 2: 0.35}}
    assert by_step(CURVES, "lr0", BATCH) == {}
    assert final_step(CURVES) == 2
    assert final_step({"a": {0: run({})}}) is None


def test_the_summary_pairs_the_change_from_step_0_and_the_difference_from_the_control_by_seed():
    text = render("curve", "learning-if", CURVES, control="lr0", val_tasks=64)
    # lr1e-4: final - step 0 per seed = [0.18, 0.17, 0.09] (mean 0.1467); final - lr0 final = [0.19, 0.16, 0.10]
    change = t_interval([0.18, 0.17, 0.09])
    versus = t_interval([0.19, 0.16, 0.10])
    assert f"0.147 [{change.low:.3f}, {change.high:.3f}] (n=3)" in text
    assert f"0.150 [{versus.low:.3f}, {versus.high:.3f}] (n=3)" in text
    row = next(line for line in text.splitlines() if line.startswith("| lr0 | 3 |"))
    assert row.endswith("|  |")  # the control is not compared with itself
    assert text.index("| lr0 | 3 |") < text.index("| lr1e-4 | 3 |")  # the control first
    assert "64 validation rollouts per point" in text and "step 2 - lr0" in text


def test_each_arm_has_a_row_per_step_with_the_interval_over_seeds_and_the_kl_mean_and_max():
    text = render("curve", "learning-if", CURVES, control="lr0")
    half = T_975_DF2 * math.sqrt(sum((v - 0.4) ** 2 for v in (0.40, 0.45, 0.35)) / 2) / math.sqrt(3)
    assert f"| 2 | 3 | 0.400 | [{0.4 - half:.3f}, {0.4 + half:.3f}] | 0.400 | 0.0400 | 0.0500 |" in text
    assert "| 1 |  |  |  | 0.200 | 0.2000 | 0.3000 |" in text  # a step without validation: batch and KL only
    assert "| 0 | 3 | 0.253 |" in text  # lr1e-4's step-0 baseline


def test_a_seed_missing_a_point_narrows_that_points_seeds_only():
    curves = {"lr0": {0: run({0: 0.2, 2: 0.2}), 1: run({0: 0.3})}, "lr1": {0: run({0: 0.2, 2: 0.6})}}
    text = render("curve", "x", curves, control="lr0")
    assert "| 2 | 1 | 0.200 | (one seed: no interval) |" in text
    assert "0.400 (one seed: no interval) (n=1)" in text  # lr1 - lr0 at step 2 over the one common seed
    assert pytest.approx(0.25) == sum(by_step(curves, "lr0", VAL)[0].values()) / 2


def test_the_report_goes_between_its_own_markers_and_keeps_the_page():
    page = f"# IF\n\nHistory.\n\n{START}\nold\n{END}\n\n## Earlier\n"
    updated = with_report(page, "new\n", START, END)
    assert updated == f"# IF\n\nHistory.\n\n{START}\nnew\n{END}\n\n## Earlier\n"
    assert "ablation-report" not in updated


def test_the_curves_round_trip_through_json_and_the_report_renders_from_the_file(tmp_path, capsys):
    assert curves_from_json(curves_to_json(CURVES)) == CURVES
    data, page = tmp_path / "curve.json", tmp_path / "page.md"
    data.write_text(curves_to_json(CURVES))
    main(["--ablation", "curve", "--load-data", str(data), "--control", "lr0", "--val-tasks", "64", "--out", str(page)])
    assert render("curve", "learning-if", CURVES, control="lr0", val_tasks=64) in page.read_text()
    assert "| lr1e-4 | 3 |" in capsys.readouterr().out
