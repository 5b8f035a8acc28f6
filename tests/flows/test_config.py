"""Run config: profiles, dotted overrides, unknown keys, cross-field checks; the pure builders of flows.setup."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from engines.vllm import VLLMConfig
from flows import config_schema
from flows.cli import parse_overrides
from flows.config import PROFILES_DIR, RunConfig, apply_overrides, load_run_config
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
from trainer.advantages import AdvantageConfig
from trainer.backends.torch import OptimizerConfig
from trainer.backends.verl import VerlBackendConfig
from trainer.losses import LossConfig
from trainer.samples import SampleLimits
from trainer.scheduling import ScheduleConfig

PROFILES = {"swe-local": "swe", "if-local": "instruction_following", "search-local": "search", "swe-gpu": "swe",
            "calculator-local": "calculator"}


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
    assert config.rollout.group_size == 3 and config.backend.loss.clip_high == 0.28
    assert config.backend.loss == LossConfig(clip_high=0.28), "the section is the trainer's own LossConfig"
    with pytest.raises(ValueError, match="is a value, not a section"):
        apply_overrides({"seed": 1}, {"seed.x": 2})


UNKNOWN_KEYS = [  # (overrides, the section named, the unknown key, a valid key listed)
    ({"bogus": 1}, "the top level of the run config", "bogus", "rollout"),
    ({"rollout.bogus": 1}, "section 'rollout'", "bogus", "group_size"),
    ({"backend.loss": {"clipp": 0.1}}, "section 'backend.loss'", "clipp", "clip_low"),
    ({"backend.loss.clipp": 0.1}, "section 'backend.loss'", "clipp", "clip_high"),
    ({"backend.schedule.budget": 1}, "section 'backend.schedule'", "budget", "max_tokens_per_micro_batch"),
    ({"backend.optimizer.learning_rate": 1}, "section 'backend.optimizer'", "learning_rate", "lr"),
    ({"backend.verl.flash": True}, "section 'backend.verl'", "flash", "attn_implementation"),
    ({"backend.torch.threads": 1}, "section 'backend.torch'", "threads", "dtype"),
    ({"backend.verl.model_path": "/m"}, "section 'backend.verl'", "model_path", "n_gpus_per_node"),
    ({"engine.vllm.port": 8000}, "section 'engine.vllm'", "port", "gpu_memory_utilization"),
    ({"algorithm.advantage.estimatr": "rloo"}, "section 'algorithm.advantage'", "estimatr", "estimator"),
    ({"algorithm.samples.max_tokens": 1}, "section 'algorithm.samples'", "max_tokens", "overflow"),
    ({"backend.lr": 1e-5}, "section 'backend'", "lr", "optimizer"),
    ({"algorithm.max_response_tokens": 96}, "section 'algorithm'", "max_response_tokens", "samples"),
]


@pytest.mark.parametrize(("overrides", "section", "key", "valid"), UNKNOWN_KEYS, ids=lambda v: str(v)[:40])
def test_an_unknown_key_names_itself_its_section_and_the_valid_keys(overrides, section, key, valid):
    with pytest.raises(ValidationError) as error:
        load_run_config("if-local", overrides)
    message = str(error.value)
    assert f"unknown key {key!r} in {section}" in message and "valid keys: " in message
    assert valid in message.split("valid keys: ")[1]


def test_an_unknown_key_in_a_profile_file_is_named_with_its_section(tmp_path):
    profile = tmp_path / "typo.yaml"
    profile.write_text("recipe: swe\nbackend:\n  schedule: {layot: padded}\n")
    with pytest.raises(ValidationError, match=r"unknown key 'layot' in section 'backend.schedule': did you mean "
                                              r"'layout'\? valid keys: num_workers, num_updates"):
        load_run_config(profile)


SET_KNOBS = [  # (--set pair, where the value lands, the value)
    ("backend.schedule.layout=padded", lambda c: c.backend.schedule.layout, "padded"),
    ("backend.schedule.balancer=greedy", lambda c: c.backend.schedule.balancer, "greedy"),
    ("backend.schedule.pad_to_multiple=64", lambda c: c.backend.schedule.pad_to_multiple, 64),
    ("backend.schedule.max_tokens_per_micro_batch=1024", lambda c: c.backend.schedule.max_tokens_per_micro_batch,
     1024),
    ("backend.schedule.num_updates=3", lambda c: c.backend.schedule.num_updates, 3),
    ("algorithm.samples.overflow=drop", lambda c: c.algorithm.samples.overflow, "drop"),
    ("algorithm.samples.max_prompt_tokens=512", lambda c: c.algorithm.samples.max_prompt_tokens, 512),
    ("algorithm.advantage.estimator=rloo", lambda c: c.algorithm.advantage.estimator, "rloo"),
    ("algorithm.advantage.agent_failure_reward=null", lambda c: c.algorithm.advantage.agent_failure_reward, None),
    ("backend.loss.kl_coef=0.01", lambda c: c.backend.loss.kl_coef, 0.01),
    ("backend.optimizer.lr=3e-5", lambda c: c.backend.optimizer.lr, 3e-5),
    ("backend.optimizer.betas=[0.9, 0.95]", lambda c: c.backend.optimizer.betas, (0.9, 0.95)),
    ("backend.optimizer.max_grad_norm=null", lambda c: c.backend.optimizer.max_grad_norm, None),
    ("backend.torch.dtype=bfloat16", lambda c: c.backend.torch.dtype, "bfloat16"),
    ("backend.verl.param_dtype=float32", lambda c: c.backend.verl.param_dtype, "float32"),
    ("backend.verl.strategy=fsdp", lambda c: c.backend.verl.strategy, "fsdp"),
    ("engine.vllm.enforce_eager=true", lambda c: c.engine.vllm.enforce_eager, True),
    ("engine.vllm.extra_args=[--seed, '1']", lambda c: c.engine.vllm.extra_args, ("--seed", "1")),
]


@pytest.mark.parametrize(("pair", "read", "value"), SET_KNOBS, ids=[pair for pair, _, _ in SET_KNOBS])
def test_every_component_knob_is_settable_with_set(pair, read, value):
    assert read(load_run_config("if-local", parse_overrides([pair]))) == value


BAD_VALUES = [  # (overrides, what the error names)
    ({"backend.schedule.layout": "rows"}, "backend.schedule.layout"),
    ({"backend.schedule.num_workers": 2}, "backend.schedule.num_workers=2: the backend sets it"),
    ({"backend.loss.clip_low": 1.5}, "LossConfig clip_low=1.5"),
    ({"algorithm.samples.max_response_tokens": 0}, "SampleLimits.max_response_tokens=0"),
    ({"backend.optimizer.lr": -1}, "OptimizerConfig lr=-1"),
    ({"algorithm.advantage.level": "token"}, "algorithm.advantage.level"),
    ({"backend.verl.temperature": 0.7}, "backend.verl.temperature is removed"),
    ({"algorithm.advantage.format_reward": -0.1}, "AdvantageConfig.format_reward=-0.1"),
    ({"algorithm.advantage.format_reward": 0.2}, "format_reward=0.2 with recipe 'instruction_following'"),
]


@pytest.mark.parametrize(("overrides", "named"), BAD_VALUES, ids=lambda v: str(v)[:40])
def test_a_bad_value_is_refused_by_its_component_naming_the_setting(overrides, named):
    with pytest.raises(ValidationError, match=re.escape(named)):
        load_run_config("if-local", overrides)


def test_each_knob_has_one_default_the_components():
    config = RunConfig(recipe="swe")
    assert config.backend.schedule == ScheduleConfig() and config.backend.loss == LossConfig()
    assert config.backend.optimizer == OptimizerConfig() and config.algorithm.samples == SampleLimits()
    assert config.algorithm.advantage == AdvantageConfig()
    verl = VerlBackendConfig(Path("/m"))
    assert config.backend.verl.attn_implementation == verl.attn_implementation
    assert config.engine.vllm.gpu_memory_utilization == VLLMConfig("m").gpu_memory_utilization


def test_the_settings_reference_in_the_profiles_readme_is_current():
    """deploy/configs/README.md lists every setting with its default and doc; regenerate with
    `python -m flows.config_reference` after changing one."""
    from flows.config_reference import README, main, reference_rows, with_reference

    text = README.read_text()
    assert with_reference(text) == text, "run `.venv/bin/python -m flows.config_reference`"
    assert main(["--check"]) == 0
    rows = {key: (default, doc) for key, default, doc in reference_rows()}
    assert rows["backend.schedule.max_tokens_per_micro_batch"][0] == "`8192`"
    assert all(doc for _, doc in rows.values()), [key for key, (_, doc) in rows.items() if not doc]
    assert {p.name for p in PROFILES_DIR.glob("*.yaml")} <= set(text.split("`")), "every profile is listed"


def test_loading_a_config_parses_no_source(monkeypatch):
    """CPython 3.11's parser is not thread-safe (a Prefect flow run failed with "AST constructor recursion depth
    mismatch" while its config loaded): a load reads the sections' keys only, never their docstrings' source."""
    def no_parsing(cls):
        raise AssertionError(f"field_docs({cls.__name__}) called while loading a config")

    monkeypatch.setattr(config_schema, "field_docs", no_parsing)
    config = load_run_config("swe-local", {"backend.loss.clip_low": 0.1, "backend.schedule.layout": "padded"})
    assert config.backend.loss.clip_low == 0.1 and config.backend.schedule.layout == "padded"
    with pytest.raises(ValidationError, match="unknown key 'clip_lo' in section 'backend.loss'"):
        load_run_config("swe-local", {"backend.loss.clip_lo": 0.1})


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
    assert in_flight_target(load_run_config("if-local"), groups_still_needed=5) == 5
    assert in_flight_target(load_run_config("if-local"), groups_still_needed=-1) == 0
    assert in_flight_target(sync, groups_still_needed=9) == sync.rollout.batch_groups


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
    assert settings.engine.num_threads is None
    threads = process_settings(load_run_config("if-local", {"engine.num_threads": 1}), plan).engine.num_threads
    from engines.embedded import EmbeddedEngine

    assert EmbeddedEngine("/m", num_threads=threads).environment()["OMP_NUM_THREADS"] == "1"
    from flows.run_processes import RunProcesses

    for overrides, option, value in (({}, "--prefix-cache-tokens", "16384"),
                                     ({"engine.prefix_cache_tokens": 0}, "--prefix-cache-tokens", "0"),
                                     ({}, "--dtype", "float32"),
                                     ({"engine.dtype": "bfloat16"}, "--dtype", "bfloat16")):
        command = RunProcesses(process_settings(load_run_config("if-local", overrides), plan))._engine().command()
        assert command[command.index(option) + 1] == value


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

    torch_backend = build_backend(load_run_config("swe-local", {"backend.schedule.layout": "padded"}), plan)
    assert torch_backend.config.schedule == ScheduleConfig(num_updates=2, max_tokens_per_micro_batch=2048,
                                                           layout="padded")


def test_a_running_gateway_without_its_admin_token_is_refused_with_the_fix(tmp_path, monkeypatch):
    from flows.run_processes import RunProcesses

    monkeypatch.delenv("HARNESSRL_ADMIN_TOKEN", raising=False)
    config = load_run_config("if-local", {"gateway.url": "http://gw:8100"})
    settings = process_settings(config, fresh_plan(config, "r", tmp_path))
    with pytest.raises(ValueError, match=r"gateway.url='http://gw:8100' .* set \$HARNESSRL_ADMIN_TOKEN"):
        RunProcesses(settings)
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "secret")
    assert RunProcesses(settings).admin_token == "secret"


def started_gateway(profile: str, overrides: dict):
    """The `GatewayConfig` a run of `profile` with `overrides` starts its gateway with (its YAML read back)."""
    from flows.run_processes import gateway_settings
    from gateway.config import GatewayConfig

    config = load_run_config(profile, overrides)
    settings = process_settings(config, fresh_plan(config, "r", Path("/models/base")))
    return GatewayConfig.model_validate(yaml.safe_load(yaml.safe_dump(gateway_settings(settings))))


def test_the_started_gateway_gets_the_runs_sampling_policy(tmp_path):
    default = started_gateway("if-local", {"work_dir": str(tmp_path)})
    assert (default.sampling.train, default.sampling.temperature) == ("enforce", 1.0)
    assert default.model_aliases and default.side_models
    chosen = started_gateway("if-local", {"work_dir": str(tmp_path), "gateway.sampling.train": "record",
                                          "gateway.sampling.temperature": 0.7})
    assert (chosen.sampling.train, chosen.sampling.temperature) == ("record", 0.7)
    with pytest.raises(ValueError, match="gateway.sampling"):
        load_run_config("if-local", {"gateway.sampling.train": "ignore"})


@pytest.mark.parametrize(("recipe", "recorded_turns"), [("codex", True), ("claude-code", True), ("swe", False)])
def test_the_coding_clis_runs_start_their_gateway_with_recorded_turns(recipe, recorded_turns, tmp_path):
    """Claude Code and Codex re-serialise the history they re-send: their runs' gateway gives the engine the recorded
    tokens of those turns (gateway/recorded_turns.py); other recipes' gateways render what is sent."""
    started = started_gateway("swe-local", {"work_dir": str(tmp_path), "recipe": recipe,
                                            "algorithm.advantage.format_reward": 0,
                                            "rollout.task_overrides": {}})  # the profile's are mini-swe-agent's
    assert started.recorded_turns is recorded_turns


@pytest.mark.parametrize(("profile", "recipe", "chosen"), [("calculator-local", "calculator", True),
                                                             ("swe-local", "codex", False)])
def test_a_profile_chooses_recorded_turns_over_its_recipe(profile, recipe, chosen, tmp_path):
    """`gateway.recorded_turns` set in the profile wins over the recipe's choice, both ways; unset, the recipe's."""
    base = {"work_dir": str(tmp_path), "recipe": recipe}
    if recipe == "codex":  # the profile's task options and format term are mini-swe-agent's
        base |= {"algorithm.advantage.format_reward": 0, "rollout.task_overrides": {}}

    def started(overrides: dict) -> bool:
        return started_gateway(profile, {**base, **overrides}).recorded_turns

    assert started({}) is not chosen
    assert started({"gateway.recorded_turns": chosen}) is chosen
    with pytest.raises(ValueError, match="gateway.recorded_turns"):
        load_run_config("calculator-local", {"gateway.recorded_turns": "sometimes"})


def test_field_docs_retries_the_parsers_thread_error_and_gives_up_after_its_tries(monkeypatch):
    """The docs of a section still read when another thread's parse made ours fail once (CPython 3.11)."""
    import ast
    import dataclasses

    @dataclasses.dataclass
    class Knobs:
        depth: int = 1
        """How deep."""

    real_parse, failures = ast.parse, [1]

    def flaky(source, *args, **kwargs):
        if failures:
            failures.pop()
            raise SystemError("AST constructor recursion depth mismatch (before=69, after=75)")
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(config_schema.ast, "parse", flaky)
    assert config_schema.field_docs(Knobs) == {"depth": "How deep."}

    def broken(source, *args, **kwargs):
        raise SystemError("AST constructor recursion depth mismatch")

    monkeypatch.setattr(config_schema.ast, "parse", broken)

    @dataclasses.dataclass
    class Other:
        width: int = 2
        """How wide."""

    with pytest.raises(SystemError):
        config_schema.field_docs(Other)
