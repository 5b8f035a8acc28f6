"""The data-stage Prefect tasks: thin wrappers that load rows, validate them and publish the report."""

from __future__ import annotations

from pathlib import Path

import pytest

import flows.prefect_tasks.data as data_tasks
from controller.recipes import get_recipe
from flows.prefect_tasks.data import load_dataset, report_artifact_key, validate_tasks
from rollouts.expectations import DataValidationError


@pytest.fixture
def artifacts(monkeypatch) -> list[dict]:
    """Markdown artifacts the tasks create, captured instead of sent to a Prefect API."""
    created: list[dict] = []
    monkeypatch.setattr(data_tasks, "create_markdown_artifact", lambda **kwargs: created.append(kwargs))
    return created


def test_load_tasks_returns_the_rows_of_the_source(tmp_path):
    rows = load_dataset.fn("generated", "search", 4, 2, tmp_path)
    assert rows == [{**row, "recipe": "search"} for row in get_recipe("search").generate(4, 2)]


def test_validate_tasks_publishes_the_report_and_returns_it_when_valid(artifacts):
    report = validate_tasks.fn(get_recipe("instruction_following").generate(5, 0), "instruction_following")
    assert report.success
    assert [a["key"] for a in artifacts] == ["data-validation-instruction-following"]
    assert artifacts[0]["markdown"] == report.to_markdown()


def test_validate_tasks_publishes_the_failed_report_then_raises(artifacts):
    rows = get_recipe("search").generate(5, 0)
    rows[3]["question"] = ""
    with pytest.raises(DataValidationError, match="search-0-00003") as raised:
        validate_tasks.fn(rows, "search")
    assert "question is a non-empty string" in str(raised.value)
    assert artifacts[0]["key"] == report_artifact_key("search") and "FAILED" in artifacts[0]["markdown"]


@pytest.mark.slow
def test_in_a_flow_the_report_becomes_a_markdown_artifact(prefect_api, tmp_path: Path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    @flow
    def load_and_validate(cache_dir: Path) -> bool:
        rows = load_dataset("generated", "search", 6, 0, cache_dir)
        return validate_tasks(rows, "search").success

    assert load_and_validate(tmp_path)
    with get_client(sync_client=True) as client:
        key_filter = ArtifactFilter(key=ArtifactFilterKey(any_=["data-validation-search"]))
        found = client.read_artifacts(artifact_filter=key_filter)
    assert found and found[0].type == "markdown" and "search: passed" in found[0].data
