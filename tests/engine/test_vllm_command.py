"""The vLLM engine without vLLM: launch command and environment, control-request mappings, refit sequencing."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import httpx
import pytest

from engines import vllm as vllm_engine
from engines.base import Engine
from engines.serving.chat_template import FALLBACK_TEMPLATE_PATH
from engines.vllm import (
    RESUME_REQUEST,
    WORKER_EXTENSION,
    ControlRequest,
    VLLMConfig,
    VLLMEngine,
    build_launch_command,
    build_launch_env,
    check_refit_results,
    refit_requests,
    sleep_request,
    wake_up_request,
)
from engines.vllm_worker import checkpoint_files

CPU = VLLMConfig(model="/models/smol", served_model_name="policy", port=8123, device="cpu", dtype="float32",
                 max_model_len=2048, enforce_eager=True, python="/venv/bin/python")
GPU = VLLMConfig(model="/models/qwen", port=9000, tensor_parallel_size=4, gpu_memory_utilization=0.7,
                 python="/venv/bin/python")


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_cpu_command_runs_the_openai_server_module_with_the_configured_flags():
    argv = build_launch_command(CPU)
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    expected = {"--model": "/models/smol", "--served-model-name": "policy", "--host": "127.0.0.1", "--port": "8123",
                "--dtype": "float32", "--max-model-len": "2048", "--tensor-parallel-size": "1",
                "--generation-config": "vllm", "--worker-extension-cls": WORKER_EXTENSION,
                "--logprobs-mode": "processed_logprobs"}
    assert {flag: flag_value(argv, flag) for flag in expected} == expected
    assert "--enforce-eager" in argv
    assert "--enable-sleep-mode" not in argv
    assert "--gpu-memory-utilization" not in argv


def test_logprobs_mode_is_passed_and_an_unknown_one_is_refused_naming_the_choices():
    raw = dataclasses.replace(CPU, logprobs_mode="raw_logprobs")
    assert flag_value(build_launch_command(raw), "--logprobs-mode") == "raw_logprobs"
    with pytest.raises(ValueError, match="logprobs_mode='processed'.*processed_logprobs"):
        build_launch_command(dataclasses.replace(CPU, logprobs_mode="processed"))


def test_gpu_command_enables_sleep_mode_and_sets_memory_and_parallelism():
    argv = build_launch_command(GPU)
    assert "--enable-sleep-mode" in argv
    assert flag_value(argv, "--gpu-memory-utilization") == "0.7"
    assert flag_value(argv, "--tensor-parallel-size") == "4"
    assert flag_value(argv, "--served-model-name") == "/models/qwen"
    assert "--enforce-eager" not in argv and "--max-model-len" not in argv


def test_sleep_mode_can_be_switched_off_on_gpu_and_extra_args_come_last():
    argv = build_launch_command(dataclasses.replace(GPU, enable_sleep_mode=False, extra_args=("--seed", "7")))
    assert "--enable-sleep-mode" not in argv
    assert argv[-2:] == ["--seed", "7"]


def test_tool_calls_are_parsed_with_hermes_by_default():
    argv = build_launch_command(CPU)
    assert flag_value(argv, "--tool-call-parser") == "hermes"
    assert "--enable-auto-tool-choice" in argv and "--chat-template" not in argv


def test_tool_flags_follow_the_config_and_the_fallback_template_resolves_to_its_file():
    argv = build_launch_command(dataclasses.replace(CPU, chat_template="hermes_chatml"))
    template = Path(flag_value(argv, "--chat-template"))
    assert template == FALLBACK_TEMPLATE_PATH and template.is_file()
    assert flag_value(build_launch_command(dataclasses.replace(CPU, chat_template="/t/qwen.jinja")),
                      "--chat-template") == "/t/qwen.jinja"
    off = build_launch_command(dataclasses.replace(CPU, tool_call_parser=None, enable_auto_tool_choice=False))
    assert "--tool-call-parser" not in off and "--enable-auto-tool-choice" not in off
    parser_only = build_launch_command(dataclasses.replace(CPU, enable_auto_tool_choice=False))
    assert flag_value(parser_only, "--tool-call-parser") == "hermes" and "--enable-auto-tool-choice" not in parser_only


def test_worker_extension_names_an_importable_class_with_the_refit_method():
    module_name, _, class_name = WORKER_EXTENSION.rpartition(".")
    extension = getattr(importlib.import_module(module_name), class_name)
    assert callable(extension.load_checkpoint)
    assert refit_requests("/ckpt", 1)[1].json["method"] == "load_checkpoint"


@pytest.mark.parametrize(("change", "message"), [
    ({"enable_sleep_mode": True}, "no sleep mode"),
    ({"sleep_level": 3}, "sleep_level=3"),
    ({"tensor_parallel_size": 0}, "tensor_parallel_size=0"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization=1.5"),
    ({"max_model_len": 0}, "max_model_len=0"),
    ({"port": 0}, "port=0"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"tool_call_parser": None}, "needs a tool_call_parser"),
])
def test_invalid_configs_are_rejected_with_the_field_named(change, message):
    with pytest.raises(ValueError, match=message):
        build_launch_command(dataclasses.replace(CPU, **change))


def test_env_enables_dev_routes_and_makes_the_worker_extension_importable():
    env = build_launch_env(CPU)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert Path(env["PYTHONPATH"], *WORKER_EXTENSION.split(".")[:-1]).with_suffix(".py").is_file()
    assert "VLLM_CACHE_ROOT" not in env


def test_env_cache_root_gpu_and_overrides():
    env = build_launch_env(dataclasses.replace(GPU, cache_root="/tmp/c", extra_env=(("VLLM_SERVER_DEV_MODE", "0"),)))
    assert env["VLLM_CACHE_ROOT"] == "/tmp/c"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    assert env["VLLM_SERVER_DEV_MODE"] == "0"


@pytest.mark.parametrize(("config", "level"), [
    (CPU, 0),
    (GPU, 1),
    (dataclasses.replace(GPU, sleep_level=2), 2),
    (dataclasses.replace(GPU, enable_sleep_mode=False, sleep_level=2), 0),
])
def test_sleep_drains_then_sleeps_at_the_level_the_platform_supports(config, level):
    assert sleep_request(config) == ControlRequest("POST", "/sleep", params={"level": level, "mode": "wait"})
    assert wake_up_request() == ControlRequest("POST", "/wake_up")


def test_refit_pauses_loads_resets_the_prefix_cache_and_sets_the_version():
    routes = [(r.route, r.params, r.json) for r in refit_requests(Path("/ckpt/step-3"), 3)]
    assert routes == [
        ("/pause", {"mode": "wait"}, None),
        ("/collective_rpc", None, {"method": "load_checkpoint", "args": ["/ckpt/step-3"]}),
        ("/reset_prefix_cache", None, None),
        ("/update_weight_version", None, {"new_version": "3"}),
    ]


@pytest.mark.parametrize(("body", "tp", "ok"), [
    ({"results": [{"files": 1, "heads_refreshed": 1}]}, 1, True),
    ({"results": [{"files": 2, "heads_refreshed": 0}] * 2}, 2, True),
    ({"results": [{"files": 1}]}, 2, False),
    ({"results": [{"files": 0}]}, 1, False),
    ({"results": [None]}, 1, False),
    (None, 1, False),
])
def test_refit_results_need_one_loaded_checkpoint_per_worker(body, tp, ok):
    if ok:
        check_refit_results(body, tp)
    else:
        with pytest.raises(RuntimeError):
            check_refit_results(body, tp)


def test_checkpoint_files_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        checkpoint_files(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="safe_serialization"):
        checkpoint_files(tmp_path)
    (tmp_path / "model-00002.safetensors").write_bytes(b"")
    (tmp_path / "model-00001.safetensors").write_bytes(b"")
    assert [p.name for p in checkpoint_files(tmp_path)] == ["model-00001.safetensors", "model-00002.safetensors"]


def test_engine_has_every_protocol_member_and_picks_a_free_port(tmp_path):
    engine = VLLMEngine(dataclasses.replace(CPU, port=0), log_path=tmp_path / "log")
    protocol_members = {name for name in vars(Engine) if not name.startswith("_")}
    assert protocol_members <= set(dir(engine))
    assert engine.config.port > 0
    assert engine.base_url == f"http://127.0.0.1:{engine.config.port}"


def test_start_without_the_vllm_venv_names_the_make_target(tmp_path):
    engine = VLLMEngine(dataclasses.replace(CPU, python=str(tmp_path / "nope")), log_path=tmp_path / "log")
    with pytest.raises(FileNotFoundError, match="make vllm-venv"):
        engine.start()


class FakeServer:
    """Answers vLLM's control routes in-process, recording each call; `fail_load` makes the refit RPC fail."""

    def __init__(self, fail_load: bool = False, sleeping: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_load = fail_load
        self.sleeping = sleeping

    def request(self, method: str, url: str, **_: object) -> httpx.Response:
        route = httpx.URL(url).path
        self.calls.append(route)
        if route == "/is_sleeping":
            return httpx.Response(200, json={"is_sleeping": self.sleeping})
        if route == "/collective_rpc":
            if self.fail_load:
                return httpx.Response(500, json={"error": {"message": "worker failed"}})
            return httpx.Response(200, json={"results": [{"files": 1, "heads_refreshed": 1}]})
        return httpx.Response(200, json={})


class FakeGateway:
    def __init__(self) -> None:
        self.registered: list[tuple] = []
        self.versions: list[tuple[str, int]] = []

    def register_model(self, name, base_url, version=0, served_name=None):
        self.registered.append((name, base_url, version, served_name))
        return "record"

    def set_model_version(self, name, version):
        self.versions.append((name, version))


def engine_with(monkeypatch, tmp_path, server: FakeServer) -> VLLMEngine:
    monkeypatch.setattr(vllm_engine.httpx, "request", server.request)
    return VLLMEngine(CPU, log_path=tmp_path / "log")


def test_update_weights_runs_the_refit_and_updates_the_registered_gateway_version(monkeypatch, tmp_path):
    server, gateway = FakeServer(), FakeGateway()
    engine = engine_with(monkeypatch, tmp_path, server)
    assert engine.register_with_gateway(gateway, "policy", version=2) == "record"
    assert gateway.registered == [("policy", "http://127.0.0.1:8123/v1", 2, "policy")]
    engine.update_weights(tmp_path, 3)
    assert server.calls == ["/is_sleeping", "/pause", "/collective_rpc", "/reset_prefix_cache",
                            "/update_weight_version", "/resume"]
    assert gateway.versions == [("policy", 3)]
    assert engine.policy_version == 3


def test_a_failed_refit_still_resumes_and_keeps_the_old_version(monkeypatch, tmp_path):
    server, gateway = FakeServer(fail_load=True), FakeGateway()
    engine = engine_with(monkeypatch, tmp_path, server)
    engine.register_with_gateway(gateway, "policy", version=2)
    with pytest.raises(RuntimeError, match="collective_rpc answered 500"):
        engine.update_weights(tmp_path, 3)
    assert server.calls[-1] == RESUME_REQUEST.route
    assert gateway.versions == [] and engine.policy_version == 2


def test_update_weights_on_a_sleeping_server_asks_for_wake_up(monkeypatch, tmp_path):
    engine = engine_with(monkeypatch, tmp_path, FakeServer(sleeping=True))
    with pytest.raises(RuntimeError, match="wake_up"):
        engine.update_weights(tmp_path, 1)
