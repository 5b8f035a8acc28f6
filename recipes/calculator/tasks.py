"""Calculator tasks: a 3-digit number and a 2-digit number summed or multiplied, seeded, with the exact result.

Half the tasks are sums and half products (alternating), so a small model that adds in its head now and then still
needs the tool for most of them. The row carries the expression the grader re-evaluates and the answer for readers
(the data suite checks that they agree).
"""

from __future__ import annotations

import random
from typing import Any

from recipes.calculator.arithmetic import calculate

DEFAULT_MAX_TURNS = 4  # model calls per rollout: the tool call, the answer, two spare
OPERATIONS = (("sum", "+"), ("product", "*"))
QUESTION = "What is {expression}?"


def make_task(task_id: str, left: int, right: int, operation: str) -> dict[str, Any]:
    """One task: `left` and `right` combined by `operation` ('sum' or 'product')."""
    symbols = dict(OPERATIONS)
    if operation not in symbols:
        raise ValueError(f"unknown operation {operation!r}; use one of {', '.join(symbols)}")
    expression = f"{left} {symbols[operation]} {right}"
    return {"id": task_id, "question": QUESTION.format(expression=expression), "expression": expression,
            "answer": int(calculate(expression)), "operation": operation, "max_turns": DEFAULT_MAX_TURNS}


def generate(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` tasks reproducible from `seed`: ids `calc-<seed>-<index>`, sums and products alternating."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(f"calculator:{seed}")
    tasks = []
    for index in range(count):
        operation, _ = OPERATIONS[index % len(OPERATIONS)]
        tasks.append(make_task(f"calc-{seed}-{index:05d}", rng.randint(100, 999), rng.randint(10, 99), operation))
    return tasks
