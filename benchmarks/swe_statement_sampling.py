"""How a small model answers the bottom of the SWE difficulty ladder, per statement wording: the share of answers the
`one_command` harness parses as an action, the share whose action is exactly the statement's command, and the share
whose action fixes the bug (run in the agent's command sandbox on a copy of the buggy file: afterwards the file is the
fixed one, byte for byte).

    .venv/bin/python benchmarks/swe_statement_sampling.py [--store ~/.cache/harnessrl/swe] [--samples 32] \
        [--temperature 0.35] [--max-tokens 64] [--wordings ladder previous command-first ...] \
        [--systems harness five-line ...] [--instances harness bare] [--bugs N] [--show N]

Samples the model directly (transformers, no engine, no harness; an action runs only in the sandbox) on every
single-line bug of the task store (`make train` generates it), with a system prompt (the harness's, or a variant)
and the statement in the user turn (the harness's instance template, or bare) under the model's chat template, at
the gateway's temperature with top-p 1 and no top-k (as the gateway enforces). The bug site comes from each
instance's patch, so every wording states the same bugs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from recipes.swe.generator import base_path, load_instances
from recipes.swe.harness_configs import action_regex, load_harness_config
from recipes.swe.ladder import BugSite, edit_command, ladder_statement
from recipes.swe.run_metrics import parsed_action
from recipes.swe.sandbox import Sandbox

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


def previous_statement(site: BugSite) -> str:
    """The ladder's level-0 statement until 2026-12-05: the line, its replacement, the command in a bare fence."""
    return (f"The file `{site.file}` has a bug on line {site.line}, which reads:\n\n```\n{site.buggy_line}\n```\n\n"
            f"Replace that line by exactly this line:\n\n```\n{site.fixed_line}\n```\n\n"
            f"This command makes the change:\n\n```\n{edit_command(site)}\n```\n\nRun it, then submit.")


WORDINGS: dict[str, Callable[[BugSite], str]] = {
    "ladder": lambda site: ladder_statement(0, "", site.file, site),
    "previous": previous_statement,
    "previous-fenced": lambda site: previous_statement(site).replace(
        f"```\n{edit_command(site)}\n```", f"```bash\n{edit_command(site)}\n```"),
    "command-first": lambda site: (f"Fix the bug on line {site.line} of `{site.file}` with this command:\n\n"
                                   f"```bash\n{edit_command(site)}\n```"),
    "run-only": lambda site: f"Run this command:\n\n```bash\n{edit_command(site)}\n```",
}
"""Statement wordings by name: the ladder's level 0 as the generator writes it, and variants to compare."""

EXAMPLE = "```bash\nsed -i '12s|==|!=|' main.py\n```"
SYSTEMS: dict[str, str | None] = {
    "harness": None,  # the one_command configuration's own system prompt
    "five-line": f"You fix bugs by running one shell command.\nReply with the command in a ```bash code block, like "
                 f"this:\n\n{EXAMPLE}\n",  # the configuration's prompt until 2026-12-05
    "one-shot-short": ("You fix bugs by running one shell command. Reply with only the command, in a ```bash code "
                       f"block.\n\nExample task: Line 12 of `main.py` has a bug. This command fixes it:\n\n{EXAMPLE}"
                       f"\n\nReply with only that command, in a ```bash code block.\n\nExample reply:\n\n{EXAMPLE}"),
}
"""System prompts by name: the harness configuration's, and variants to compare."""

INSTANCES = {"harness": None, "bare": "{{task}}"}
"""User-turn templates by name: the configuration's instance template (the statement, then the reply format), or the
statement alone (the configuration's template until 2026-12-05)."""


def exact_command(action: str | None, site: BugSite) -> bool:
    """Whether the action is the statement's command (surrounding whitespace ignored)."""
    return action is not None and action.strip() == edit_command(site)


def buggy_text(fixed_text: str, site: BugSite) -> str:
    """The file as the task's repository holds it: the fixed file with the site's line made buggy."""
    lines = fixed_text.split("\n")
    if lines[site.line - 1] != site.fixed_line:
        raise ValueError(f"{site.file}:{site.line} is not {site.fixed_line!r} in the base; the store changed")
    lines[site.line - 1] = site.buggy_line
    return "\n".join(lines)


def fixes(action: str, site: BugSite, fixed_text: str, timeout_s: float = 10.0) -> bool:
    """Whether running `action` (in the agent's sandbox, on a directory holding only the buggy file) leaves exactly the
    fixed file."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-fixcheck-") as scratch:
        repo, target = Path(scratch) / "repo", Path(scratch) / "repo" / site.file
        target.parent.mkdir(parents=True)
        target.write_text(buggy_text(fixed_text, site), encoding="utf-8")
        Sandbox(cwd=repo, shim_dir=Path(scratch) / "shim").run(action, timeout_s)
        return target.is_file() and target.read_text(encoding="utf-8", errors="replace") == fixed_text


def wilson(successes: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion (scipy's binomial test)."""
    if total == 0:
        return math.nan, math.nan
    interval = stats.binomtest(successes, total).proportion_ci(confidence, method="wilson")
    return float(interval.low), float(interval.high)


def user_turn(statement: str, instance: str = "harness") -> str:
    """The user turn: template `instance` (INSTANCES) with the statement as the task, rendered with Jinja as
    mini-swe-agent renders it."""
    from jinja2 import StrictUndefined, Template

    template = INSTANCES[instance] or load_harness_config(HARNESS_CONFIG)["agent"]["instance_template"]
    return Template(template, undefined=StrictUndefined).render(task=statement)


def sample_answers(model, tokenizer, system: str, user: str, samples: int, temperature: float,
                   max_tokens: int) -> list[str]:
    import torch

    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                             top_p=1.0, top_k=0, max_new_tokens=max_tokens, num_return_sequences=samples,
                             pad_token_id=tokenizer.eos_token_id)
    return tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)


@dataclass(frozen=True)
class Bug:
    """One single-line bug of the store: its site and the fixed file's text (the base's)."""

    site: BugSite
    fixed_text: str


def store_bugs(store: Path, limit: int | None) -> list[Bug]:
    """The store's single-line bugs (the first `limit`), with their base files."""
    bugs = []
    for row in load_instances(store):
        site = site_from_patch(row["patch"])
        if site is not None:
            bugs.append(Bug(site, (base_path(store, row) / site.file).read_text(encoding="utf-8")))
    return bugs[:limit]


def rate_cells(count: int, total: int) -> str:
    low, high = wilson(count, total)
    return f"{count / total:.3f} | [{low:.3f}, {high:.3f}]"


def measure(wording: str, bugs: Sequence[Bug], generate: Callable[[str], list[str]], regex: str, show: int) -> str:
    """The table row of one wording: answers, parsed / exact / fixing rates with Wilson intervals, seconds."""
    started_s, parsed, exact, fixing, total = time.perf_counter(), 0, 0, 0, 0
    for index, bug in enumerate(bugs):
        answers = generate(WORDINGS[wording](bug.site))
        if index == 0 and show:
            print("\n".join(f"--- {wording} answer {i}:\n{answer}" for i, answer in enumerate(answers[:show])))
        actions = [parsed_action(answer, regex) for answer in answers]
        parsed += sum(action is not None for action in actions)
        exact += sum(exact_command(action, bug.site) for action in actions)
        fixing += sum(action is not None and fixes(action, bug.site, bug.fixed_text) for action in actions)
        total += len(answers)
    return (f"| {wording} | {total} | {rate_cells(parsed, total)} | {rate_cells(exact, total)} | "
            f"{rate_cells(fixing, total)} | {time.perf_counter() - started_s:.0f} |")


def main(argv: Sequence[str] | None = None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engines.model_cache import resolve_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=Path("~/.cache/harnessrl/swe").expanduser())
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.35)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--wordings", nargs="+", default=list(WORDINGS), choices=list(WORDINGS))
    parser.add_argument("--systems", nargs="+", default=["harness"], choices=list(SYSTEMS))
    parser.add_argument("--instances", nargs="+", default=["harness"], choices=list(INSTANCES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bugs", type=int, default=None, help="only the first this many bugs")
    parser.add_argument("--show", type=int, default=0, help="print this many answers of the first bug per wording")
    args = parser.parse_args(argv)
    bugs = store_bugs(args.store, args.bugs)
    if not bugs:
        raise SystemExit(f"no single-line bug in {args.store}/instances.jsonl: run `make train` once to generate them")
    path = resolve_model(args.model)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
    print(f"{len(bugs)} single-line bugs, {args.samples} answers each, T {args.temperature}, top-p 1, no top-k, "
          f"at most {args.max_tokens} new tokens; model {args.model}")
    print("| system | user turn | wording | answers | parsed action | 95% CI | exact command | 95% CI | fixes the bug "
          "| 95% CI | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, instance in itertools.product(args.systems, args.instances):
        system = SYSTEMS[name] or load_harness_config(HARNESS_CONFIG)["agent"]["system_template"]
        for wording in args.wordings:
            torch.manual_seed(args.seed)
            print(f"| {name} | {instance} " + measure(wording, bugs, lambda statement, system=system, instance=instance:
                  sample_answers(model, tokenizer, system, user_turn(statement, instance), args.samples,
                                 args.temperature, args.max_tokens), action_regex(HARNESS_CONFIG), args.show),
                  flush=True)


if __name__ == "__main__":
    main()
