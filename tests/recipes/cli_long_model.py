"""A variant of the `tiny` random model for the real CLIs: a context that holds their prompts, and answers that end.

Claude Code's prompt is about 12k tokens and Codex's about 10k (tools and instructions), past `tiny`'s 4096
positions. `tiny` is a Llama (rotary positions, no position table), so a longer context is only its config's
`max_position_embeddings`. Codex sends no output limit, and a random model almost never samples its end token, so it
would write until the context is full: the variant unties the output head from the embeddings and gives every
token's embedding one constant dimension that only the end token's output row reads, which makes the end token likely
at every step (its probability is measured when the variant is built). The weights stay random otherwise.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

LONG_MAX_POSITIONS = 32768
CONSTANT_DIM = 0  # the embedding dimension set to 1.0 for every token
EOS_WEIGHT = 1.4  # the end token's output weight on it: p(end) about 0.4 per step (0.28 at 1.3, 0.79 at 1.6)


def build_long_tiny(tiny_dir: Path, dest: Path) -> float:
    """Write the variant of the model in `tiny_dir` into `dest`; returns the end token's probability after a short
    prompt (so a test can check the variant does what it is for)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    eos = int(model.config.eos_token_id)
    with torch.no_grad():
        embedding = model.get_input_embeddings().weight
        head = embedding.detach().clone()
        embedding[:, CONSTANT_DIM] = 1.0
        head[:, CONSTANT_DIM] = 0.0
        head[eos, CONSTANT_DIM] = EOS_WEIGHT
        model.config.tie_word_embeddings = False
        model.lm_head = torch.nn.Linear(embedding.shape[1], embedding.shape[0], bias=False)
        model.lm_head.weight = torch.nn.Parameter(head)
        model.config.max_position_embeddings = LONG_MAX_POSITIONS
        probe = torch.tensor([[1, 100, 200, 300, 400, 500]])
        p_eos = float(torch.softmax(model(probe).logits[0, -1], dim=-1)[eos])
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"):
        if (tiny_dir / name).exists():
            shutil.copy(tiny_dir / name, dest / name)
    tokenizer_config = json.loads((dest / "tokenizer_config.json").read_text())
    (dest / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config,
                                                            "model_max_length": LONG_MAX_POSITIONS}))
    return p_eos
