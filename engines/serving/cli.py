"""`harnessrl engine serve`: run the embedded engine's HTTP server."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from engines.embedded import DTYPES, PREFIX_CACHE_TOKENS

app = typer.Typer(help="The embedded CPU inference engine.", no_args_is_help=True, add_completion=False)


@app.callback()
def engine() -> None:
    """The embedded CPU inference engine."""


@app.command()
def serve(
    model: str = typer.Option("smollm2-135m-instruct", help="Local HF directory, known name, or hub id."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8001, help="TCP port."),
    served_model_name: str | None = typer.Option(
        None, help="Name clients pass as `model` (default: MODEL)."),
    max_batch_size: int = typer.Option(16, min=1, help="Most rows generating at once."),
    models_dir: str | None = typer.Option(None, help="Provisioning cache for known names."),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
    logprobs_mode: str = typer.Option("processed", help="processed: logprobs of the distribution each token was "
                                      "sampled from (temperature, top-k, min-p, top-p); raw: of the model's raw "
                                      "distribution."),
    prefix_cache_tokens: int = typer.Option(PREFIX_CACHE_TOKENS, min=0, help="Tokens of prompts' and finished "
                                            "rows' KV kept for later prompts that start with them (a group's other "
                                            "rollouts, an agent's next call); 0: off."),
    dtype: str = typer.Option("float32", help=f"Weights' and activations' dtype, one of {', '.join(DTYPES)} "
                              "(logprobs are computed in float32 either way)."),
) -> None:
    """Serve MODEL over an OpenAI-compatible API with token ids, logprobs and policy versions."""
    import torch
    import uvicorn

    from engines.model_cache import resolve_model
    from engines.serving.app import create_app
    from engines.serving.model_holder import ModelHolder
    from engines.serving.scheduler import GenerationScheduler
    from engines.serving.state import EngineState

    if dtype not in DTYPES:
        raise typer.BadParameter(f"{dtype!r}; use one of {', '.join(DTYPES)}", param_hint="--dtype")
    logging.basicConfig(level=log_level.upper())
    model_dir = resolve_model(model, models_dir)
    holder = ModelHolder(Path(model_dir), dtype=getattr(torch, dtype))
    state = EngineState(holder, GenerationScheduler(holder, max_batch_size, logprobs_mode,
                                                                  prefix_cache_tokens), served_model_name or model)
    uvicorn.run(create_app(state), host=host, port=port, log_level=log_level)


if __name__ == "__main__":
    app()
