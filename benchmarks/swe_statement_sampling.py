"""How a small model answers the bottom of the SWE difficulty ladder, per statement wording: the share of answers the
`one_command` harness parses as an action, and the share whose action is exactly the statement's fixing command.

    .venv/bin/python benchmarks/swe_statement_sampling.py [--store ~/.cache/harnessrl/swe] [--samples 32] \
        [--temperature 0.5] [--max-tokens 64] [--wordings ladder fenced command-first]

Samples the model directly (transformers, no engine, no harness, no sandbox: nothing it writes is run) on every
single-line bug of the task store (`make train` generates it), with the harness's system prompt and the statement as
the user turn under the model's chat template, at the gateway's temperature with top-p 1 and no top-k (as the
gateway enforces). The bug site comes from each instance's patch, so every wording states the same bugs.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from agents.swe.harness_configs import action_regex, load_harness_config
from agents.swe.ladder import BugSite, edit_command, ladder_statement
from agents.swe.run_metrics import action_parsed

HARNESS_CONFIG = "one_command"
HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def site_from_patch(patch: str) -> BugSite | None:
    """The one-line bug of a SWE-smith patch (which introduces the bug): the file, the line (in the buggy file) and
    its buggy and fixed text; None unless the patch changes exactly one line of one file."""
    file, line, removed, added, position = None, 0, [], [], 0
    for text in patch.splitlines():
        if text.startswith("+++ "):
            if file is not None:
                return None
            file = text[4:].removeprefix("b/")
        elif (hunk := HUNK.match(text)) is not None:
            position = int(hunk.group(1))
        elif text.startswith("-") and not text.startswith("---"):
            removed.append(text[1:])
            line = line or position
            position += 1
        elif text.startswith("+"):
            added.append(text[1:])
        elif text.startswith(" ") or text == "":
            position += 1
    if file is None or len(removed) != 1 or len(added) != 1:
        return None
    return BugSite(file=file, line=line, buggy_line=added[0], fixed_line=removed[0], kind="")


WORDINGS: dict[str, Callable[[BugSite], str]] = {
    "ladder": lambda site: ladder_statement(0, "", site.file, site),
    "fenced": lambda site: ladder_statement(0, "", site.file, site).replace(
        f"```\n{edit_command(site)}\n```", f"```bash\n{edit_command(site)}\n```"),
    "command-first": lambda site: (f"Fix the bug on line {site.line} of `{site.file}` with this command:\n\n"
                                   f"```bash\n{edit_command(site)}\n```"),
}
"""Statement wordings by name: the ladder's level 0 as the generator writes it, and variants to compare."""


def exact_command(answer: str, site: BugSite, regex: str) -> bool:
    """Whether the answer's one action is the statement's command (surrounding whitespace ignored)."""
    found = re.findall(regex, answer, re.DOTALL)
    return len(found) == 1 and found[0].strip() == edit_command(site)


def wilson(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion."""
    if total == 0:
        return math.nan, math.nan
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def sample_answers(model, tokenizer, system: str, statement: str, samples: int, temperature: float,
                   max_tokens: int) -> list[str]:
    import torch

    messages = [{"role": "system", "content": system}, {"role": "user", "content": statement}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                             top_p=1.0, top_k=0, max_new_tokens=max_tokens, num_return_sequences=samples,
                             pad_token_id=tokenizer.eos_token_id)
    return tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)


def main(argv: Sequence[str] | None = None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engines.model_cache import resolve_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=Path("~/.cache/harnessrl/swe").expanduser())
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--wordings", nargs="+", default=list(WORDINGS), choices=list(WORDINGS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in (args.store / "instances.jsonl").read_text().splitlines() if line.strip()]
    sites = {row["instance_id"]: site for row in rows if (site := site_from_patch(row["patch"])) is not None}
    if not sites:
        raise SystemExit(f"no single-line bug in {args.store}/instances.jsonl: run `make train` once to generate them")
    path = resolve_model(args.model)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
    system = load_harness_config(HARNESS_CONFIG)["agent"]["system_template"]
    regex = action_regex(HARNESS_CONFIG)
    print(f"{len(sites)} single-line bugs, {args.samples} answers each, T {args.temperature}, top-p 1, no top-k, "
          f"at most {args.max_tokens} new tokens; model {args.model}")
    print("| wording | answers | parsed action | 95% CI | exact fixing command | 95% CI | s |")
    print("|---|---|---|---|---|---|---|")
    for wording in args.wordings:
        torch.manual_seed(args.seed)
        started_s, parsed, exact, total = time.perf_counter(), 0, 0, 0
        for site in sites.values():
            answers = sample_answers(model, tokenizer, system, WORDINGS[wording](site), args.samples,
                                     args.temperature, args.max_tokens)
            parsed += sum(action_parsed(answer, regex) for answer in answers)
            exact += sum(exact_command(answer, site, regex) for answer in answers)
            total += len(answers)
        p_low, p_high = wilson(parsed, total)
        e_low, e_high = wilson(exact, total)
        print(f"| {wording} | {total} | {parsed / total:.3f} | [{p_low:.3f}, {p_high:.3f}] | {exact / total:.3f} | "
              f"[{e_low:.3f}, {e_high:.3f}] | {time.perf_counter() - started_s:.0f} |", flush=True)


if __name__ == "__main__":
    main()
