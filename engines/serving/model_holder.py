"""The served model's weights: load, release (sleep), reload (wake) and replace them by a checkpoint.

Only the generation thread calls the mutating methods, and only between batches. The tokenizer stays loaded
while asleep so that requests can still be validated and queued.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

logger = logging.getLogger(__name__)

ARCHITECTURE_FIELDS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                       "num_key_value_heads", "intermediate_size")


class WeightsError(ValueError):
    """A checkpoint cannot replace the served weights; the message names the mismatch."""


class ModelHolder:
    """Owns the model, tokenizer, the path the current weights come from, and the policy version."""

    def __init__(self, model_dir: Path, dtype: torch.dtype = torch.float32) -> None:
        self.model_dir = model_dir
        self.dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.config = AutoConfig.from_pretrained(str(model_dir))
        self.eos_token_ids = _eos_token_ids(model_dir, self.config, self.tokenizer)
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.eos_token_ids[0]
        self.max_model_len = int(getattr(self.config, "max_position_embeddings", 2048))
        self.weights_path = model_dir
        self.policy_version = 0
        self.model: torch.nn.Module | None = None
        self.load()

    @property
    def asleep(self) -> bool:
        """True while the weights are released."""
        return self.model is None

    def load(self) -> None:
        """Loads the weights from `weights_path` (used at start and on wake-up)."""
        self.model = AutoModelForCausalLM.from_pretrained(str(self.weights_path), dtype=self.dtype).eval()

    def release(self) -> None:
        """Drops the weights and returns their memory."""
        self.model = None
        gc.collect()

    def update(self, path: Path, version: int) -> None:
        """Replaces the weights by the checkpoint at `path` (now, or at wake-up while asleep)."""
        check_same_architecture(self.config, path)
        self.weights_path = path
        if self.model is not None:
            new_model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self.dtype).eval()
            self.model = new_model
            gc.collect()
        self.policy_version = version
        logger.info("weights from %s, policy_version %d", path, version)


def check_same_architecture(served: object, path: Path) -> None:
    """Raises WeightsError unless `path` holds a HF checkpoint with the served architecture."""
    if not (path / "config.json").is_file():
        raise WeightsError(f"{path} has no config.json; pass a directory written by save_pretrained")
    if not list(path.glob("*.safetensors")):
        raise WeightsError(f"{path} has no *.safetensors file; save the checkpoint with safe_serialization")
    candidate = AutoConfig.from_pretrained(str(path))
    for field in ARCHITECTURE_FIELDS:
        mine, theirs = getattr(served, field, None), getattr(candidate, field, None)
        if mine != theirs:
            raise WeightsError(f"checkpoint {path} has {field}={theirs!r} but the served model has {mine!r}; "
                               "only checkpoints of the served architecture can be loaded")


def _eos_token_ids(model_dir: Path, config: object, tokenizer: object) -> list[int]:
    """End-of-sequence ids: generation_config's, else the config's, else the tokenizer's."""
    try:
        eos = GenerationConfig.from_pretrained(str(model_dir)).eos_token_id
    except OSError:
        eos = None
    if eos is None:
        eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise WeightsError(f"{model_dir} defines no eos_token_id; set it in generation_config.json")
    return [eos] if isinstance(eos, int) else list(eos)
