"""The order in which `make test` hands test files to its two xdist workers: the costliest first.

With `--dist loadfile` a file runs whole on one worker, so the suite's wall time is at least its longest file, and a
long file started last runs alone at the end. xdist's own order (most tests first) starts the end-to-end flow files,
one or two tests each, last; `make test` passes `--no-loadscope-reorder` and `conftest.py` puts the files below first,
in this order, the rest after them in collection order (longest processing time first: the many short files even out
the two workers at the end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

COSTLIEST_FILES = (
    "tests/test_readme.py",
    "tests/flows/test_ablation_flow.py",
    "tests/flows/test_deployment.py",
    "tests/flows/test_train_flow.py",
    "tests/engine/test_vllm_server.py",
    "tests/flows/test_train_flow_sync.py",
    "tests/flows/test_train_connect.py",
    "tests/engine/test_openai_api.py",
    "tests/trainer/test_torch_backend.py",
    "tests/flows/test_data_flow.py",
    "tests/e2e/test_recipes_controller.py",
    "tests/flows/test_evaluate_flow.py",
    "tests/engine/test_embedded.py",
    "tests/gateway/test_schemathesis.py",
    "tests/gateway/test_fuzz_openapi.py",
    "tests/recipes/calculator/test_harness_episode.py",
    "tests/gateway/test_multi_gateway.py",
    "tests/gateway/test_pause.py",
    "tests/test_models.py",
    "tests/tracking/test_screenshots.py",
    "tests/recipes/swe/test_harness_e2e.py",
    "tests/controller/test_reconcile.py",
    "tests/gateway/test_engine_proxy.py",
    "tests/recipes/swe/test_generator.py",
    "tests/recipes/test_cli_engine_episode.py",
)
"""Test files by wall time in `make test` (`--durations`: a CI run of 2026-12-01, 29 min for the suite, and a run of
the slow tier at a load average of 20-40 the same day), longest first; see tests/README.md "Timings". Re-ranked the
same day after the deployment, end-to-end recipes and data-flow tests got cheaper (their measured before/after ratio
applied to the quiet-ish clean-clone run: train_flow 199 s, deployment ~186, vLLM 109, ablation 96, sync 87, data
flow ~59, e2e recipes ~55). Re-ranked 2026-12-06 from that day's clean-clone CI (`--durations`): the README file
~180 s (its own-agent block with dynamic sampling 125 s, the pieces by hand 47 s), the ablation flow ~170 s (the
learning-flow test merged into it: one flow start and three runs instead of two flows and four runs), deployment
~135 s, train_flow ~100 s, vLLM ~90 s, sync 73 s, connect 55 s. The ablation flow test ran two runs instead of
three from 2026-12-06 (its flow phase 128-178 s before, 115-139 s after, measured alone at load 1-3); its place here
is not re-measured in a CI run. 2026-12-07 (`--cpu-json` of a `make test` suite run): the schemathesis and OpenAPI
fuzz files (42 and 29 CPU-s), the calculator harness episodes (27) and the multi-gateway file (24) moved up beside
the embedded engine's (42)."""


class HasNodeId(Protocol):
    """A collected test (pytest.Item), by its node id."""

    nodeid: str


Item = TypeVar("Item", bound=HasNodeId)


def costliest_first(items: Sequence[Item], costliest: Sequence[str] = COSTLIEST_FILES) -> list[Item]:
    """`items` with the tests of the files in `costliest` first, in that order; each file's tests and every other
    file keep their order."""
    rank = {path: index for index, path in enumerate(costliest)}
    return sorted(items, key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


SHARED_FIXTURE_FILES = {
    "mlflow_server": ("tests/gateway/test_otel_mlflow.py", "tests/tracking/test_mlflow_tracker.py",
                      "tests/tracking/test_traces_server.py", "tests/tracking/test_tracking_tasks.py",
                      "tests/tracking/test_screenshots.py"),
}
"""Files that run on one worker, one after the other, because they share a session fixture that starts a server:
one MLflow server start (about 15 CPU-s, 16-24 s of a loaded worker) instead of one per worker and file. Every file
using the fixture must be listed (tests/test_file_order.py checks)."""
WORK_UNITS = {path: fixture for fixture, paths in SHARED_FIXTURE_FILES.items() for path in paths}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or the shared fixture its file is grouped under."""
    path = nodeid.split("::", 1)[0]
    return WORK_UNITS.get(path, path)
