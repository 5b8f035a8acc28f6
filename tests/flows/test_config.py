"""Run config: profiles, dotted overrides, unknown keys, cross-field checks; the pure builders of flows.setup."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.cli import parse_overrides
from flows.config import PROFILES_DIR, apply_overrides, load_run_config
from flows.setup import (
    fresh_plan,
    in_flight_target,
    process_settings,
    run_folder,
    run_name,
    task_stream,
    upload_due,
    validation_due,
)

PROFILES = {"swe-local": "swe", "if-local": "instruction_following", "search-local": "search", "swe-gpu": "swe"}


@pytest.mark.parametrize(("profile", "recipe"), PROFILES.items())
def test_every_training_profile_loads_for_its_recipe(profile, recipe):
    config = load_run_config(profile, recipe=recipe)
    assert config.recipe == recipe and config.rollout.schedule == "async"


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_profile_on_disk_loads(path):
    """Data and evaluation profiles too (swe-eval-gpu is only read on a cluster)."""
    assert load_run_config(path.stem).recipe


def test_overrides_set_nested_keys_and_unknown_keys_are_errors():
    config = load_run_config("if-local", {"rollout.group_size": 3, "backend.loss": {"clip_high": 0.28}})
    assert config.rollout.group_size == 3 and config.loss_config().clip_high == 0.28
    with pytest.raises(ValidationError, match="rollout.bogus"):
        load_run_config("if-local", {"rollout.bogus": 1})
    with pytest.raises(ValueError, match=r"backend.loss has unknown keys \['clipp'\]"):
        load_run_config("if-local", {"backend.loss": {"clipp": 0.1}})
    with pytest.raises(ValueError, match="is a value, not a section"):
        apply_overrides({"seed": 1}, {"seed.x": 2})


def test_recipe_mismatch_and_unknown_profile_are_explained():
    with pytest.raises(ValueError, match="is for recipe 'swe', not 'search'"):
        load_run_config("swe-local", recipe="search")
    with pytest.raises(FileNotFoundError, match="known profiles"):
        load_run_config("nope")


def test_async_needs_more_in_flight_than_a_batch():
    with pytest.raises(ValidationError, match="max_inflight_groups=2 is below rollout.batch_groups=4"):
        load_run_config("if-local", {"rollout.max_inflight_groups": 2})
    sync = load_run_config("if-local", {"rollout.max_inflight_groups": 2, "rollout.schedule": "sync"})
    assert in_flight_target(sync) == sync.rollout.batch_groups
    assert in_flight_target(load_run_config("if-local")) == 6


def test_tracking_uri_precedence(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = load_run_config("if-local")
    assert config.tracking_uri().startswith("sqlite:////") and config.tracking_uri().endswith("mlruns/mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert load_run_config("if-local").tracking_uri() == "http://mlflow:5000"
    explicit = load_run_config("if-local", {"tracking.tracking_uri": "sqlite:////tmp/x.db"})
    assert explicit.tracking_uri() == "sqlite:////tmp/x.db"


def test_run_name_plan_and_services_from_config(tmp_path):
    config = load_run_config("if-local", {"work_dir": str(tmp_path)})
    assert run_name(config, now_s=0) == "instruction-following-19700101-000000"
    assert run_name(load_run_config("if-local", {"name": "mine"})) == "mine"
    plan = fresh_plan(config, "r1", Path("/models/base"))
    assert plan.run_dir == tmp_path / "r1" and plan.checkpoint_root == tmp_path / "r1" / "checkpoints"
    assert plan.state.iteration == 0 and plan.start_model == Path("/models/base")
    settings = process_settings(config, plan)
    assert settings.model_name == "policy" and settings.policy_version == 0
    assert settings.controller_args[settings.controller_args.index("--concurrency") + 1] == "24"
    assert settings.controller_args[-2:] == ("--recipe", "instruction_following")
    assert settings.engine_num_threads is None
    threads = process_settings(load_run_config("if-local", {"engine.num_threads": 1}), plan).engine_num_threads
    from engines.embedded import EmbeddedEngine

    assert EmbeddedEngine("/m", num_threads=threads).environment()["OMP_NUM_THREADS"] == "1"


def test_a_flow_names_its_run_and_serves_a_checkpoint_version(tmp_path):
    config = load_run_config("swe-local", {"work_dir": str(tmp_path)}, recipe="swe")
    assert run_name(config, now_s=0, prefix="swe-eval") == "swe-eval-19700101-000000"
    assert run_name(load_run_config("swe-local", {"name": "mine"}), prefix="swe-eval") == "mine"
    assert run_folder(config, "e1") == tmp_path / "e1"
    plan = fresh_plan(config, "e1", Path("/ckpt/model"), policy_version=7)
    assert plan.run_dir == run_folder(config, "e1") and plan.state.policy_version == 7
    settings = process_settings(config, plan)
    assert (settings.run_dir, settings.policy_version, settings.model_path) == (tmp_path / "e1", 7,
                                                                                Path("/ckpt/model"))


def test_schedules_of_validation_uploads_and_task_order():
    config = load_run_config("if-local", {"algorithm.iterations": 7, "algorithm.val_every": 3, "checkpoints.every": 2})
    assert [i for i in range(1, 8) if validation_due(config, i)] == [3, 6, 7]
    assert [u for u in range(1, 8) if upload_due(config, u, iteration=u)] == [2, 4, 6, 7]
    no_val = load_run_config("if-local", {"data.val_tasks": 0})
    assert not any(validation_due(no_val, i) for i in range(1, 10))
    stream = task_stream([{"id": "a"}, {"id": "b"}], start=3)
    assert [next(stream) for _ in range(3)] == [(3, {"id": "b"}), (4, {"id": "a"}), (5, {"id": "b"})]
    resumed = task_stream([{"id": "a"}, {"id": "b"}], start=5, reopen=[2, 4])
    assert [index for index, _ in (next(resumed) for _ in range(4))] == [2, 4, 5, 6], "open groups first"
    with pytest.raises(ValueError, match="no training tasks"):
        next(task_stream([], 0))


def test_cli_overrides_parse_yaml_values():
    assert parse_overrides(["a.b=3", "c=[1, 2]", "d=true", "e=text"]) == {"a.b": 3, "c": [1, 2], "d": True,
                                                                          "e": "text"}
    with pytest.raises(Exception, match="key.path=value"):
        parse_overrides(["novalue"])


def test_engine_url_gives_the_host_and_port_the_engines_take():
    from flows.run_processes import engine_host_port

    assert engine_host_port("http://10.0.0.5:8000/") == ("10.0.0.5", 8000)
    assert engine_host_port("http://engine.svc:9000") == ("engine.svc", 9000)
    with pytest.raises(ValueError, match="needs a host and a port"):
        engine_host_port("http://engine.svc")


def test_the_gpu_profile_builds_vllm_and_verl_by_configuration_alone(tmp_path):
    """swe-gpu: the same flow code builds a vLLM engine (sleep mode, bf16, the run's served name) and the verl
    backend (8 workers, the profile's verl options); nothing is started."""
    from engines.vllm import VLLMEngine, build_launch_command
    from flows.run_processes import RunProcesses
    from flows.setup import build_backend
    from trainer.backends.verl import VerlBackend

    config = load_run_config("swe-gpu", {"work_dir": str(tmp_path)}, recipe="swe")
    plan = fresh_plan(config, "gpu-run", Path("/models/Qwen2.5-Coder-7B-Instruct"))
    backend = build_backend(config, plan)
    assert isinstance(backend, VerlBackend)
    assert backend.config.n_gpus_per_node == 8 and backend.config.schedule.num_workers == 8
    assert backend.config.attn_implementation == "flash_attention_2" and backend.config.param_dtype == "bfloat16"
    assert backend.config.optimizer.lr == 1e-6 and backend.config.schedule.max_tokens_per_micro_batch == 32768

    engine = RunProcesses(process_settings(config, plan))._engine()
    assert isinstance(engine, VLLMEngine)
    argv = build_launch_command(engine.config)
    flags = dict(zip(argv, argv[1:], strict=False))
    assert flags["--model"] == "/models/Qwen2.5-Coder-7B-Instruct" and flags["--served-model-name"] == "policy"
    assert flags["--dtype"] == "bfloat16" and flags["--max-model-len"] == "32768"
    assert flags["--gpu-memory-utilization"] == "0.6" and "--enable-sleep-mode" in argv

    with pytest.raises(ValueError, match=r"backend.verl has unknown keys \['flash'\]"):
        load_run_config("swe-gpu", {"backend.verl": {"flash": True}}, recipe="swe")


def test_a_running_gateway_without_its_admin_token_is_refused_with_the_fix(tmp_path, monkeypatch):
    from flows.run_processes import RunProcesses

    monkeypatch.delenv("HARNESSRL_ADMIN_TOKEN", raising=False)
    config = load_run_config("if-local", {"gateway.url": "http://gw:8100"})
    settings = process_settings(config, fresh_plan(config, "r", tmp_path))
    with pytest.raises(ValueError, match=r"gateway.url='http://gw:8100' .* set \$HARNESSRL_ADMIN_TOKEN"):
        RunProcesses(settings)
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "secret")
    assert RunProcesses(settings).admin_token == "secret"
