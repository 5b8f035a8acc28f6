"""benchmarks/learning_report.py and tracking/learning_plots.py: the PNGs, the page, rerun detection, and the whole
report read from and logged to a file-store MLflow laid out as flow `ablation` lays out an experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from benchmarks.learning_report import END, START, build_report, main, render, rerun_pairs_from_arms, verdict
from flows.ablation_plan import LEARNING_ARMS, NAMED_ARMS, named_arms, parse_arms
from tracking.learning_plots import plot_claims, plot_curves
from tracking.learning_stats import claims

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CURVES = {
    "trained": {0: {0: 0.20, 2: 0.50}, 1: {0: 0.30, 2: 0.62}, 2: {0: 0.25, 2: 0.53}},
    "trained-rerun": {0: {0: 0.20, 2: 0.45}, 1: {0: 0.30, 2: 0.64}, 2: {0: 0.25, 2: 0.55}},
    "lr0": {0: {0: 0.20, 2: 0.20}, 1: {0: 0.30, 2: 0.30}, 2: {0: 0.25, 2: 0.25}},
}


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == PNG_SIGNATURE and path.stat().st_size > 1000


def test_the_plots_are_png_files(tmp_path):
    curves = plot_curves(CURVES, "lr0", tmp_path / "deep" / "curves.png", "title")
    made = claims(CURVES, "lr0", exclude=["trained-rerun"])
    differences = plot_claims(made, tmp_path / "claims.png", "title", reruns=made[:1])
    assert is_png(curves) and is_png(differences)
    one_seed = plot_curves({"a": {0: {0: 0.1, 1: 0.2}}}, None, tmp_path / "one.png", "one seed: no band")
    assert is_png(one_seed)


def test_the_page_states_each_claim_its_holm_p_and_the_rerun_spread():
    report = build_report(CURVES, "lr0", [("trained", "trained-rerun")])
    page = render("calc", "harnessrl", report, {"curves": "images/calc-curves.png", "claims": "images/c.png"})
    assert "![validation reward per step](images/calc-curves.png)" in page
    assert "| trained: step 2 - step 0 | 3 |" in page and "| trained - lr0 at step 2 | 3 |" in page
    assert "| lr0: step 2 - step 0 | 3 | 0.000 (every seed alike) |" in page  # the control does not move
    assert "| trained vs trained-rerun | 3 |" in page
    assert "trained-rerun: step" not in page, "a rerun arm makes no claims of its own"
    assert [verdict(c) for c in report.claims] == ["holds", "holds", "not shown (interval holds 0)"]
    weak = build_report({**CURVES, "trained": {0: {0: 0.2, 2: 0.5}, 1: {0: 0.3, 2: 0.55}, 2: {0: 0.25, 2: 0.4}}},
                        "lr0")
    assert verdict(weak.claims[0]) == "interval excludes 0, not after Holm"  # p 0.034, Holm (3 claims) 0.10


def test_every_seed_alike_is_a_sign_test_not_certainty():
    """Three seeds that each gained exactly one task of 16: no spread, so no interval; the sign test's p is 0.25."""
    alike = {"trained": {s: {0: 0.0625, 3: 0.125} for s in range(3)}, "lr0": {s: {0: 0.0625, 3: 0.0625} for s in
                                                                             range(3)}}
    report = build_report(alike, "lr0")
    assert [c.interval.p for c in report.claims] == [0.25, 0.25, 1.0]
    assert [verdict(c) for c in report.claims] == ["not shown (every seed alike: sign test only, too few seeds)"] * 2 \
        + ["not shown (interval holds 0)"]
    page = render("mt", "harnessrl", report, {"curves": "c.png", "claims": "d.png"})
    assert "| trained - lr0 at step 3 | 3 | 0.062 (every seed alike) | 0.250 | 0.750 |" in page
    six = {"trained": {s: {0: 0.0, 3: 0.1} for s in range(6)}}
    (alone,) = build_report(six, None).claims
    assert alone.interval.p == 0.03125 and verdict(alone) == "holds (sign test: every seed alike)"


def test_reruns_are_arms_with_the_same_overrides():
    arms = named_arms("learning+rerun")
    assert [a["name"] for a in arms] == ["trained", "trained-rerun", "lr0"]
    assert rerun_pairs_from_arms(arms) == [("trained", "trained-rerun")]
    assert rerun_pairs_from_arms(named_arms("learning")) == []
    assert parse_arms(named_arms("learning")) == LEARNING_ARMS
    assert set(NAMED_ARMS) == {"report", "report+lr0", "learning", "learning+rerun", "rerun"}
    assert [a["name"] for a in named_arms("rerun")] == ["trained-rerun"]
    assert named_arms("rerun")[0]["overrides"] == named_arms("learning")[0]["overrides"] == {}
    with pytest.raises(ValueError, match="no arm set 'lerning'"):
        named_arms("lerning")


def make_experiment(uri: str, ablation: str) -> str:
    """An umbrella run and arm runs tagged as flow `ablation` tags them, each with val/reward_mean per step."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("learning")
    umbrella = client.create_run(experiment, run_name=ablation,
                                 tags={"ablation": ablation, "ablation_role": "umbrella"}).info.run_id
    client.log_text(umbrella, json.dumps(named_arms("learning+rerun")), "arms.json")
    for arm, per_seed in CURVES.items():
        for seed, steps in per_seed.items():
            run = client.create_run(experiment, tags={"ablation": ablation, "ablation_role": "arm-run", "arm": arm,
                                                      "seed": str(seed), "mlflow.parentRunId": umbrella})
            for step, value in steps.items():
                client.log_metric(run.info.run_id, "val/reward_mean", value, step=step)
            client.set_terminated(run.info.run_id)
    client.set_terminated(umbrella)
    return umbrella


def test_the_report_reads_mlflow_writes_the_page_and_logs_to_the_umbrella_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a file store: no database migrations to wait for
    uri = (tmp_path / "mlruns").as_uri()
    umbrella = make_experiment(uri, "calc")
    out = tmp_path / "page.md"
    out.write_text(f"# Kept\n\n{START}\nSTALE TEXT\n{END}\n\nafter\n")
    main(["--ablation", "calc", "--experiment", "learning", "--tracking-uri", uri, "--out", str(out),
          "--images", str(tmp_path / "images"), "--save-data", str(tmp_path / "data.json")])
    page = out.read_text()
    assert page.startswith("# Kept") and page.rstrip().endswith("after") and "STALE TEXT" not in page
    assert "(images/calc-curves.png)" in page and "| trained vs trained-rerun | 3 |" in page  # from arms.json
    assert is_png(tmp_path / "images" / "calc-curves.png") and is_png(tmp_path / "images" / "calc-claims.png")
    logged = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(umbrella, "learning-report")}
    assert logged == {"learning-report/calc-curves.png", "learning-report/calc-claims.png", "learning-report/page.md"}
    again = tmp_path / "again.md"
    main(["--ablation", "calc", "--experiment", "learning", "--load-data", str(tmp_path / "data.json"), "--out",
          str(again), "--images", str(tmp_path / "images"), "--rerun", "trained", "trained-rerun"])
    from_mlflow = page.split("\n\n", 1)[1].split("\n\nafter")[0] + "\n"
    assert again.read_text() == from_mlflow.replace("runs tagged `ablation=calc`",
                                                    f"runs read from `{tmp_path / 'data.json'}`"), \
        "the same from the saved data, which the page names"


def test_two_invocations_saved_apart_are_joined_and_logged_to_a_named_umbrella(tmp_path, monkeypatch):
    """Seeds of one experiment run in two invocations, one's data saved as JSON: the report joins them (a run given
    twice is refused) and logs the page to the umbrella named by --log-to."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    umbrella = make_experiment(uri, "calc")
    first = {arm: {0: {"val/reward_mean": steps}} for arm, steps in ((a, CURVES[a][0]) for a in CURVES)}
    later = {arm: {seed: {"val/reward_mean": CURVES[arm][seed]} for seed in (1, 2)} for arm in CURVES}
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "later.json").write_text(json.dumps(later))
    out = tmp_path / "joined.md"
    main(["--ablation", "calc-joined", "--experiment", "learning", "--tracking-uri", uri, "--load-data",
          str(tmp_path / "first.json"), str(tmp_path / "later.json"), "--log-to", "calc", "--out", str(out),
          "--images", str(tmp_path / "images"), "--rerun", "trained", "trained-rerun",
          "--save-data", str(tmp_path / "joined.json")])
    joined = json.loads((tmp_path / "joined.json").read_text())
    assert {arm: sorted(seeds) for arm, seeds in joined.items()} == {arm: ["0", "1", "2"] for arm in CURVES}
    assert "| trained vs trained-rerun | 3 |" in out.read_text()
    logged = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(umbrella, "learning-report")}
    assert logged == {"learning-report/calc-joined-curves.png", "learning-report/calc-joined-claims.png",
                      "learning-report/joined.md"}
    with pytest.raises(ValueError, match="arm '(trained|trained-rerun|lr0)' seed 0 is in both"):
        main(["--ablation", "x", "--load-data", str(tmp_path / "first.json"), str(tmp_path / "joined.json"),
              "--out", str(tmp_path / "x.md"), "--images", str(tmp_path / "images"), "--no-log"])
    with pytest.raises(SystemExit, match="no umbrella run"):
        main(["--ablation", "x", "--experiment", "learning", "--tracking-uri", uri, "--load-data",
              str(tmp_path / "first.json"), "--log-to", "nothing", "--out", str(tmp_path / "x.md"),
              "--images", str(tmp_path / "images")])
