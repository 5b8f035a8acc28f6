"""EmbeddedEngine and the CLI entry points: the launcher reports failures with the server log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engines.embedded import EmbeddedEngine
from engines.serving.cli import app as engine_app
from tests.engine.support import assert_teacher_forced


def test_engine_serve_help_lists_the_options() -> None:
    result = CliRunner().invoke(engine_app, ["serve", "--help"])
    assert result.exit_code == 0
    for option in ("--model", "--host", "--port", "--served-model-name", "--max-batch-size", "--logprobs-mode"):
        assert option in result.output


@pytest.mark.slow  # an engine server process
def test_start_failure_quotes_the_server_log(tmp_path: Path) -> None:
    engine = EmbeddedEngine(tmp_path, startup_timeout_s=60, log_path=tmp_path / "engine.log")
    with pytest.raises(RuntimeError, match="config.json"):
        engine.start()
    engine.stop()


def test_command_line_carries_the_settings(tiny_model_dir: Path) -> None:
    engine = EmbeddedEngine(tiny_model_dir, port=9999, served_model_name="x", max_batch_size=4, logprobs_mode="raw")
    command = engine.command()
    assert command[command.index("--logprobs-mode") + 1] == "raw"
    assert command[command.index("--port") + 1] == "9999"
    assert command[command.index("--served-model-name") + 1] == "x"
    assert command[command.index("--max-batch-size") + 1] == "4"
    assert engine.base_url == "http://127.0.0.1:9999"
    assert command[command.index("--prefix-cache-tokens") + 1] == "16384"
    off = EmbeddedEngine(tiny_model_dir, prefix_cache_tokens=0).command()
    assert off[off.index("--prefix-cache-tokens") + 1] == "0"
    with pytest.raises(ValueError, match="prefix_cache_tokens=-1"):
        EmbeddedEngine(tiny_model_dir, prefix_cache_tokens=-1)


@pytest.mark.slow
def test_smollm2_batched_logprobs_equal_teacher_forcing() -> None:
    import openai
    from transformers import AutoModelForCausalLM

    from engines.model_cache import prepare_model

    model_dir = prepare_model("smollm2-135m-instruct")
    reference = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with EmbeddedEngine(model_dir, served_model_name="smol") as engine:
        client = openai.AsyncOpenAI(base_url=f"{engine.base_url}/v1", api_key="unused", max_retries=0)

        async def ask(i: int):
            messages = [{"role": "user", "content": "Tell me about " + "the sea " * (1 + 4 * i)}]
            return await client.chat.completions.create(
                model="smol", messages=messages, max_tokens=8 + 4 * i, temperature=0.8, seed=i, logprobs=True,
                extra_body={"return_token_ids": True})

        async def together():
            return await asyncio.gather(*(ask(i) for i in range(4)))

        for response in asyncio.run(together()):
            choice = response.choices[0]
            logprobs = [e.logprob for e in choice.logprobs.content]
            assert_teacher_forced(reference, response.model_extra["prompt_token_ids"],
                                  choice.model_extra["token_ids"], logprobs, temperature=0.8)
