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
    for option in ("--model", "--host", "--port", "--served-model-name", "--max-batch-size", "--logprobs-mode",
                   "--dtype"):
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
    assert command[command.index("--dtype") + 1] == "float32"
    bf16 = EmbeddedEngine(tiny_model_dir, dtype="bfloat16").command()
    assert bf16[bf16.index("--dtype") + 1] == "bfloat16"
    with pytest.raises(ValueError, match="dtype='float16'"):
        EmbeddedEngine(tiny_model_dir, dtype="float16")


def test_serve_refuses_an_unknown_dtype_before_loading_anything(tmp_path: Path) -> None:
    result = CliRunner().invoke(engine_app, ["serve", "--model", str(tmp_path), "--dtype", "float16"])
    assert result.exit_code != 0 and "bfloat16" in result.output


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


@pytest.mark.slow  # an engine server process
def test_a_bfloat16_engine_reports_the_logprobs_of_its_bfloat16_weights(tiny_model_dir: Path) -> None:
    """`dtype=bfloat16` reaches the served weights (/health says so) and the reported logprobs are teacher forcing's
    through the same weights in bfloat16, to bf16 rounding (padded batches and the KV cache round differently from
    one unpadded pass: 1.5e-3 at worst here)."""
    import openai
    import torch
    from transformers import AutoModelForCausalLM

    from tests.engine.support import teacher_forced_logprobs

    bf16 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).eval()
    with EmbeddedEngine(tiny_model_dir, served_model_name="tiny", dtype="bfloat16") as engine:
        assert engine.health()["dtype"] == "bfloat16"
        client = openai.AsyncOpenAI(base_url=f"{engine.base_url}/v1", api_key="unused", max_retries=0)

        async def ask(i: int):
            return await client.completions.create(model="tiny", prompt="the sea " * (1 + 3 * i), max_tokens=12,
                                                   temperature=1.0, seed=i, logprobs=1,
                                                   extra_body={"return_token_ids": True})

        async def together():
            return await asyncio.gather(*(ask(i) for i in range(4)))

        responses = asyncio.run(together())
    for response in responses:
        choice = response.choices[0]
        extra = choice.model_extra
        expected = teacher_forced_logprobs(bf16, extra["prompt_token_ids"], extra["token_ids"])
        gaps = [abs(a - b) for a, b in zip(expected, choice.logprobs.token_logprobs, strict=True)]
        assert gaps and max(gaps) < 0.02, gaps
