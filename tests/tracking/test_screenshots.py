"""The MLflow UI screenshot script (benchmarks/mlflow_screenshots.py) against the suite's MLflow server, after a small
synthetic SWE run logged through the tracking package: a real headless Chromium renders the pages, and their DOM text
shows the run's rollouts in the trace list, one rollout's span tree, its group as a session, and both runs' loss and
reward charts (the chart filter hides the others).
End to end (a real browser on the MLflow server: `make test-e2e`); skipped without Chromium unless
HARNESSRL_REQUIRE_CHROMIUM=1 (`make test-e2e` sets it and installs Chromium as root: `make chromium`)."""

from __future__ import annotations

import os
import struct

import pytest

from benchmarks.browser import find_chromium
from benchmarks.mlflow_screenshots import FILES, take_screenshots
from tests.tracking.synthetic_run import EPISODE, log_synthetic_run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # a real browser on the MLflow UI
WIDTH_PX, HEIGHT_PX = 1280, 900

if find_chromium() is None and os.environ.get("HARNESSRL_REQUIRE_CHROMIUM") != "1":
    pytest.skip("no Chromium installed (apt-get install chromium, or `make chromium` as root); "
                "HARNESSRL_REQUIRE_CHROMIUM=1 makes this a failure", allow_module_level=True)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_the_ui_shows_the_runs_rollouts_traces_session_and_charts(mlflow_server, tmp_path):
    run = log_synthetic_run(mlflow_server.url, "screenshots-test")
    captured = take_screenshots(mlflow_server.url, "screenshots-test", tmp_path, width_px=WIDTH_PX,
                                height_px=HEIGHT_PX)
    subject, texts = captured.subject, captured.texts
    assert subject.traced_rollouts == run.rollout_ids and subject.session_id == run.group_id
    count = len(run.rollout_ids)
    assert f"{count} of {count}" in texts["traces"], "the trace list has a row per traced rollout"
    assert texts["traces"].splitlines().count(run.group_id) == count, "each row's session is the group"
    assert subject.rollout_id in run.rollout_ids[::2], "the longest episode: a solved one"
    trace_lines = texts["trace"].splitlines()
    expected_spans = [f"rollout {subject.rollout_id}"] + [
        name for seq in range(len(EPISODE)) for name in (f"chat {seq}", "tool bash")] + [f"chat {len(EPISODE)}"]
    assert [line for line in trace_lines if line in expected_spans][:len(expected_spans)] == expected_spans
    assert all(command in texts["call"] for command, _ in EPISODE[:2]), "the selected call shows the conversation"
    assert all(f"Turn {i}" in texts["session"] for i in range(1, count + 1))
    assert all(name in texts["charts"] for name in ("lr-1e-6", "lr-3e-6", "loss/total", "rollout/reward_mean"))
    assert "loss/kl" not in texts["charts"] and "train/tokens_per_s" not in texts["charts"], \
        "the chart filter shows the loss and reward charts only"
    for name, path in captured.files.items():
        assert path.endswith(FILES[name])
        with open(path, "rb") as file:
            data = file.read()
        assert png_size(data) == (WIDTH_PX, HEIGHT_PX) and len(data) > 20_000
