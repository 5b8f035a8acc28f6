"""How often a small model's answer is a usable calculator call, per `tool_choice` (the embedded engine enforces it).

Usage: python benchmarks/tool_choice_probe.py [--model smollm2-135m-instruct] [--probes 20] [--temperature 1.0]
                                              [--modes auto required named] [--seed 0] [--json PATH]

Starts the embedded engine (EmbeddedEngine, CPU) on the model and asks each probe question once per mode: "What is
A + B?" or "What is A * B?" (A three digits, B two, the same questions in every mode), with one function tool,
`calculator(expression)`, declared through the OpenAI `tools` field and a system prompt that shows a worked call in
the model's Hermes format. Modes: `auto` (the model decides), `required`, `named` (`{"type": "function", "function":
{"name": "calculator"}}`). Per mode it counts answers with a tool call at all, with a parseable one (arguments a JSON
object holding a string `expression`), and with the right expression (it evaluates to A op B), and prints a markdown
table (and writes JSON with every answer when --json is given). The section "tool_choice on the embedded engine" of
benchmarks/README.md holds a run.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import operator
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from engines.embedded import EmbeddedEngine
from engines.model_cache import prepare_model

SERVED_NAME = "probe"
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression and return its value.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string",
                                                                   "description": "for example 412 * 37"}},
                   "required": ["expression"]}}}
SYSTEM = ("You are a helpful assistant with a calculator. Never compute in your head: call the calculator.\n"
          "Example.\nUser: What is 412 * 37?\nAssistant: <tool_call>\n"
          '{"name": "calculator", "arguments": {"expression": "412 * 37"}}\n</tool_call>')
MODES: dict[str, Any] = {"auto": "auto", "required": "required",
                         "named": {"type": "function", "function": {"name": "calculator"}}}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


@dataclass(frozen=True)
class Probe:
    """One question."""

    a: int
    b: int
    op: str

    @property
    def answer(self) -> int:
        return self.a + self.b if self.op == "+" else self.a * self.b

    @property
    def question(self) -> str:
        return f"What is {self.a} {self.op} {self.b}?"


@dataclass(frozen=True)
class Outcome:
    """What one answer held."""

    mode: str
    question: str
    called: bool
    parseable: bool
    right: bool
    arguments: str | None
    content: str | None
    forced_tokens: int | None
    completion_tokens: int


def probes(count: int, seed: int) -> list[Probe]:
    """`count` questions, sums and products alternating."""
    rng = random.Random(seed)
    return [Probe(rng.randint(100, 999), rng.randint(10, 99), "+*"[i % 2]) for i in range(count)]


def evaluate(expression: str) -> int | None:
    """The integer value of an expression of integers, + - * and parentheses; None for anything else."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not a plain integer expression: {ast.dump(node)[:60]}")
    try:
        return value(ast.parse(expression.replace("x", "*").replace("×", "*"), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


def outcome(mode: str, probe: Probe, body: dict[str, Any]) -> Outcome:
    """Reads one chat completion."""
    message = body["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    arguments = calls[0]["function"]["arguments"] if calls else None
    try:
        parsed = json.loads(arguments) if arguments is not None else None
    except json.JSONDecodeError:
        parsed = None
    expression = parsed.get("expression") if isinstance(parsed, dict) else None
    parseable = bool(calls) and calls[0]["function"]["name"] == "calculator" and isinstance(expression, str)
    return Outcome(mode, probe.question, bool(calls), parseable,
                   parseable and evaluate(expression) == probe.answer, arguments, message.get("content"),
                   body.get("tool_choice_forced_tokens"), body["usage"]["completion_tokens"])


async def ask(client: httpx.AsyncClient, mode: str, probe: Probe, temperature: float, seed: int) -> Outcome:
    """One probe in one mode."""
    request = {"model": SERVED_NAME, "temperature": temperature, "max_tokens": 48, "seed": seed,
               "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": probe.question}],
               "tools": [CALCULATOR], "tool_choice": MODES[mode]}
    response = await client.post("/chat/completions", json=request)
    response.raise_for_status()
    return outcome(mode, probe, response.json())


async def run_mode(base_url: str, mode: str, questions: list[Probe], temperature: float,
                   seed: int) -> tuple[list[Outcome], float]:
    """Every probe of one mode, sent together (the engine batches them); (outcomes, seconds)."""
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=f"{base_url}/v1", timeout=1800) as client:
        outcomes = await asyncio.gather(*(ask(client, mode, probe, temperature, seed * 1000 + i)
                                          for i, probe in enumerate(questions)))
    return list(outcomes), time.perf_counter() - started


def table(results: dict[str, tuple[list[Outcome], float]]) -> str:
    """The markdown table of the rates per mode."""
    lines = ["| tool_choice | tool call | parseable call | right expression | forced prompt tokens | seconds |",
             "|---|---|---|---|---|---|"]
    for mode, (outcomes, seconds) in results.items():
        n = len(outcomes)
        forced = sorted({o.forced_tokens for o in outcomes if o.forced_tokens is not None})
        lines.append(f"| {mode} | {sum(o.called for o in outcomes)}/{n} | {sum(o.parseable for o in outcomes)}/{n} "
                     f"| {sum(o.right for o in outcomes)}/{n} | {', '.join(map(str, forced)) or '-'} "
                     f"| {seconds:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write every answer here")
    args = parser.parse_args()
    questions = probes(args.probes, args.seed)
    load_before = os.getloadavg()
    engine = EmbeddedEngine(prepare_model(args.model), served_model_name=SERVED_NAME)
    engine.start()
    try:
        results = {mode: asyncio.run(run_mode(engine.base_url, mode, questions, args.temperature, args.seed))
                   for mode in args.modes}
    finally:
        engine.stop()
    print(f"{args.model}, {args.probes} probes per mode, T = {args.temperature}, seed {args.seed}; "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps({mode: [asdict(o) for o in outcomes]
                                         for mode, (outcomes, _) in results.items()}, indent=1))


if __name__ == "__main__":
    main()
