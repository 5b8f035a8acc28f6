"""`EmbeddedEngine`: the CPU engine server launched as a subprocess and driven over HTTP."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import httpx

from engines.cpu_bf16 import warn_if_emulated_bf16
from engines.server_process import ProcessEngine, ServerProcess, free_port, with_repo_on_path

MAX_BATCH_SIZE = 16
"""Default of concurrent sequences (the run config's `engine.max_batch_size` takes it)."""
PREFIX_CACHE_TOKENS = 16384
"""Default budget of the prefix cache in tokens (about 0.75 GB of KV for SmolLM2-135M; 0: off)."""
DTYPES = ("float32", "bfloat16")
"""Weight and activation dtypes of the embedded engine; float32 (the default) matches the torch backend's default,
bfloat16 runs the matrix products on a CPU's bf16 units (AVX512-BF16, AMX: about 2-4x faster on this project's
2-core machine) and differs from a float32 trainer's logprobs by bf16 rounding; on a CPU without them torch emulates
the products, 20x and more slower than float32 (`cpu_bf16`: warned at start)."""
STARTUP_TIMEOUT_S = 300.0
"""Default longest start-up, model load included (the run config's `engine.startup_timeout_s` takes it)."""


class EmbeddedEngine(ProcessEngine):
    """Implements `Engine` by running `python -m engines.serving.cli serve` on this machine."""

    loads_weights_asleep = True
    """update_weights while asleep is applied at wake-up (one load): see trainer.collocation.publish_weights."""

    def __init__(self, model: str | Path, host: str = "127.0.0.1", port: int = 0,
                 served_model_name: str | None = None, max_batch_size: int = MAX_BATCH_SIZE,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S, request_timeout_s: float = 600.0,
                 log_path: Path | None = None, num_threads: int | None = None,
                 logprobs_mode: str = "processed", prefix_cache_tokens: int = PREFIX_CACHE_TOKENS,
                 dtype: str = "float32") -> None:
        self.model = str(model)
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name or self.model
        self.max_batch_size = max_batch_size
        self.startup_timeout_s = startup_timeout_s
        self.request_timeout_s = request_timeout_s
        self.num_threads = num_threads
        if logprobs_mode not in ("processed", "raw"):
            raise ValueError(f"logprobs_mode={logprobs_mode!r}; use 'processed' (the distribution each token was "
                             "sampled from) or 'raw' (the model's, before temperature and filtering)")
        self.logprobs_mode = logprobs_mode  # which distribution the reported logprobs are of (serving/sampling.py)
        if prefix_cache_tokens < 0:
            raise ValueError(f"prefix_cache_tokens={prefix_cache_tokens}; use 0 (off) or a positive token budget")
        self.prefix_cache_tokens = prefix_cache_tokens  # prompts' and finished rows' KV, for prompts extending them
        if dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r}; use one of {DTYPES} (float32: the trainer's default precision)")
        self.dtype = dtype  # the served weights' and activations' dtype; logprobs are computed in float32
        warn_if_emulated_bf16(dtype, "the embedded engine (engine.dtype)")
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="harnessrl-engine-", suffix=".log")[1])
        self._server = ServerProcess("engine", self.base_url, self.log_path)

    @property
    def base_url(self) -> str:
        """Server root; the OpenAI base URL is base_url + '/v1'."""
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        return [sys.executable, "-m", "engines.serving.cli", "serve", "--model", self.model,
                "--host", self.host, "--port", str(self.port), "--served-model-name", self.served_model_name,
                "--max-batch-size", str(self.max_batch_size), "--logprobs-mode", self.logprobs_mode,
                "--prefix-cache-tokens", str(self.prefix_cache_tokens), "--dtype", self.dtype]

    def start(self) -> None:
        """Launches the server and waits for /health; the error quotes the server log on failure."""
        self._server.start(self.command(), self.environment(), self.startup_timeout_s)

    def environment(self) -> dict[str, str]:
        """The server's environment: ours, the repository on PYTHONPATH, torch's thread count when set."""
        env = with_repo_on_path(dict(os.environ))
        if self.num_threads is not None:  # torch's intra-op threads; 1 avoids oversubscribing a busy small machine
            env["OMP_NUM_THREADS"] = str(self.num_threads)
        return env

    def health(self) -> dict:
        """The /health body: {status, policy_version, asleep, model, dtype, running_rows, tool_call_parse_failures,
        logprobs_mode, prefix_cache}."""
        return self._call("GET", "/health")

    def _call(self, method: str, route: str, json: dict | None = None) -> dict:
        response = httpx.request(method, f"{self.base_url}{route}", json=json, timeout=self.request_timeout_s)
        if response.status_code != 200:
            raise RuntimeError(f"engine {route} answered {response.status_code}: {response.text}")
        return response.json()

    def sleep(self) -> None:
        """Waits for in-flight generation, then releases the weights."""
        self._call("POST", "/sleep")

    def wake_up(self) -> None:
        """Reloads the weights and releases waiting requests."""
        self._call("POST", "/wake_up")

    def update_weights(self, path: Path | str, version: int) -> None:
        """Loads the checkpoint at `path` between batches and sets the policy version."""
        self._call("POST", "/update_weights", {"path": str(Path(path).resolve()), "version": version})
