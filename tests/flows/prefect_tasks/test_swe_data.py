"""The SWE data tasks without a Prefect server: probe outcomes from finished groups, the probe feed on a fake gateway,
the cleaning tasks' logs, the splits task, and the flow's pure helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.prefect_tasks.swe_data import (
    clean_empty_statements,
    clean_missing_environment,
    probe_difficulty,
    probe_outcomes,
    write_versioned_splits,
)
from gateway.records import FailureKind
from recipes.swe.splits import read_splits
from storage.directory_store import directory_store
from tests.recipes.swe.test_cleaning import row
from tests.trainer.loop_support import FakeGateway, group


def test_probe_outcomes_count_failed_rollouts_as_unsolved():
    groups = [group("g-a", {"a0": 1.0, "a1": 0.0}, task={"id": "a"}),
              group("g-b", {"b0": None, "b1": None}, failures={"b0": FailureKind.INFRA, "b1": FailureKind.AGENT},
                    task={"id": "b"})]
    outcomes, stats = probe_outcomes(groups)
    assert outcomes == {"a": [1.0, 0.0], "b": [0.0, 0.0]}
    assert stats == {"probe/rollouts": 4.0, "probe/failed_rollouts": 2.0, "probe/infra_failures": 1.0}


class InstantGateway(FakeGateway):
    """Finishes every created rollout at once with its task's reward; tasks without a reward never finish."""

    def __init__(self, rewards: dict[str, float]) -> None:
        super().__init__()
        self.rewards = rewards

    def create_rollouts(self, specs):
        created = super().create_rollouts(specs)
        for spec in specs:
            if spec.input["id"] in self.rewards:
                self.finish(spec.id, self.rewards[spec.input["id"]])
        return created


def test_probe_feed_runs_k_val_rollouts_per_task_and_lists_the_unfinished(capsys):
    gateway = InstantGateway({"solved": 1.0, "unsolved": 0.0})
    tasks = [{"id": "solved", "store": "/s"}, {"id": "unsolved", "store": "/s"}, {"id": "stuck", "store": "/s"}]
    result = probe_difficulty.fn(gateway, tasks, 3, "probe", 7, 0.2, 2, {"step_limit": 3})
    assert result.outcomes == {"solved": [1.0] * 3, "unsolved": [0.0] * 3}
    assert result.unfinished == ["stuck"]
    assert result.stats["probe/unfinished_tasks"] == 1.0 and result.stats["probe/rollouts"] == 6.0
    assert len(gateway.created) == 9 and {s.mode for s in gateway.created} == {"val"}
    assert {s.input["step_limit"] for s in gateway.created} == {3} and {s.max_attempts for s in gateway.created} == {2}
    assert "left out of the selection" in capsys.readouterr().out


def test_cleaning_tasks_log_their_counts_and_examples(capsys):
    class Backend:
        last_reasons: dict[str, str] = {}

        def available(self, instances):
            self.last_reasons = {"b": "not in the store"}
            return {i["instance_id"]: i["instance_id"] != "b" for i in instances}

    kept = clean_empty_statements.fn([row("a"), row("b"), row("c", problem_statement="")]).kept
    result = clean_missing_environment.fn(kept, Backend())
    assert [r["instance_id"] for r in result.kept] == ["a"]
    out = capsys.readouterr().out
    assert "drop_empty_statements: 3 in, 2 kept, 1 dropped (e.g. c: problem_statement is empty)" in out
    assert "drop_missing_environment: 2 in, 1 kept, 1 dropped (e.g. b: environment missing: not in the store)" in out


def test_splits_task_writes_and_publishes(tmp_path):
    store = directory_store((tmp_path / "store").as_uri())
    fields = {"name": "swe-smith", "seed": 1, "k": 2, "sizes": {"n_mixed": 1, "n_unsolved": 1, "n_heldout": 1},
              "sources": ["generated"], "steps": {}, "difficulty": {"probed": 2}}
    uri, manifest = write_versioned_splits.fn(tmp_path / "local", store, [row("a")], [row("b")], fields)
    splits = read_splits(Path(uri.removeprefix("file://")))
    assert splits.train == [row("a")] and splits.val == [row("b")] and splits.manifest == manifest


def test_flow_helpers_refuse_unsupported_setups(tmp_path, monkeypatch):
    from flows.config import load_run_config
    from flows.setup import splits_store
    from flows.swe_data import DataParams, environment_backend, prepare_swe_data, run_probes

    config = load_run_config("swe-data-local", recipe="swe")
    params = DataParams("generated", "swe-smith", None, None, 1, 1, 1, 2, 0, 1.0, 200, "registry",
                        "http://127.0.0.1:9", tmp_path, "file://x")
    assert type(environment_backend(params)).__name__ == "AllOf"  # swe-smith: image and branch
    with pytest.raises(ValueError, match="Kubernetes runner has no per-instance images"):
        run_probes(config, params, None, [row("a")])
    assert splits_store(config, "file://data/splits").root == config.resolve(Path("data/splits"))
    for name in ("HARNESSRL_S3_ENDPOINT", "HARNESSRL_S3_ACCESS_KEY", "HARNESSRL_S3_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"HARNESSRL_S3_ACCESS_KEY"):
        splits_store(config, "s3://splits/swe")
    with pytest.raises(ValueError, match="not both"):
        prepare_swe_data.fn(model="tiny", checkpoint_uri="file:///x/step-000001")
    with pytest.raises(ValueError, match="environment='cloud'"):
        prepare_swe_data.fn(environment="cloud")



def test_the_flow_chooses_environment_backends_per_environment_and_kind(tmp_path):
    from flows.swe_data import choose_environment
    from recipes.swe.environments import AllOf, GitBranchEnvironment, LocalStoreEnvironment, RegistryImageEnvironment

    template = "file:///mirrors/{repo}.git"
    local = choose_environment("local", "swe-smith", tmp_path, "http://r", template)
    assert isinstance(local, LocalStoreEnvironment) and local.store == tmp_path
    smith = choose_environment("registry", "swe-smith", tmp_path, "http://r", template, "user", "secret")
    assert isinstance(smith, AllOf) and [type(b) for b in smith.backends] == [RegistryImageEnvironment,
                                                                              GitBranchEnvironment]
    images, branches = smith.backends
    assert images.registry_url == "http://r" and images._auth == ("user", "secret")
    assert branches.remote_template == template
    verified = choose_environment("registry", "swe-bench-verified", tmp_path, "http://r", template)
    assert isinstance(verified, RegistryImageEnvironment)  # the base commit is inside the official image
    with pytest.raises(ValueError, match="environment='cloud'"):
        choose_environment("cloud", "swe-smith", tmp_path, "http://r", template)
