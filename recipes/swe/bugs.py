"""Procedural bugs as pure AST mutations: find every site where a mutator applies, then edit only that span.

A mutation replaces the exact source span of one expression (or two, for swapped returns) with the unparsed mutated
node, so the rest of the file keeps its formatting and comments and the bug patch is a small unified diff.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# Operator flips: each operator maps to the one a plausible typo or thinko would produce.
BINOP_FLIPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
}
COMPARE_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
# Off-by-one on comparisons: strict <-> non-strict.
BOUNDARY_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
}


@dataclass(frozen=True)
class Edit:
    """Replace the source between two (line, column) positions; lines from 1, columns in characters."""

    start: tuple[int, int]  # (line, column) of the first replaced character
    end: tuple[int, int]  # (line, column) just past the last replaced character
    text: str  # the replacement source text


@dataclass(frozen=True)
class Mutation:
    """One bug that can be injected into one source file."""

    kind: str  # the mutator's name, e.g. "op_flip" (becomes part of the instance id)
    line: int  # the first line the bug touches (for ordering and messages)
    edits: tuple[Edit, ...]  # non-overlapping span replacements


def _position(lines: list[str], line: int, col_bytes: int) -> tuple[int, int]:
    """Convert the AST's UTF-8 byte column into a character column."""
    return line, len(lines[line - 1].encode("utf-8")[:col_bytes].decode("utf-8", errors="replace"))


def _edit(lines: list[str], node: ast.expr | ast.stmt, replacement: ast.AST) -> Edit:
    start = _position(lines, node.lineno, node.col_offset)
    end = _position(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)
    return Edit(start=start, end=end, text=ast.unparse(replacement))


def _with_op(node: ast.AST, field: str, value: object) -> ast.AST:
    mutated = copy.deepcopy(node)
    setattr(mutated, field, value)
    return mutated


def _op_flips(node: ast.AST, lines: list[str]) -> Iterator[Mutation]:
    if isinstance(node, ast.BinOp) and type(node.op) in BINOP_FLIPS:
        flipped_op = BINOP_FLIPS[type(node.op)]()
        yield Mutation("op_flip", node.lineno, (_edit(lines, node, _with_op(node, "op", flipped_op)),))
    if isinstance(node, ast.Compare):
        yield from _compare_flips(node, lines, COMPARE_FLIPS, "op_flip")
    if isinstance(node, ast.BoolOp):
        flipped = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield Mutation("bool_flip", node.lineno, (_edit(lines, node, _with_op(node, "op", flipped)),))


def _compare_flips(node: ast.Compare, lines: list[str], table: dict, kind: str) -> Iterator[Mutation]:
    for index, op in enumerate(node.ops):
        if type(op) in table:
            ops = list(node.ops)
            ops[index] = table[type(op)]()
            yield Mutation(kind, node.lineno, (_edit(lines, node, _with_op(node, "ops", ops)),))


def _off_by_one(node: ast.AST, lines: list[str]) -> Iterator[Mutation]:
    if isinstance(node, ast.Compare):
        yield from _compare_flips(node, lines, BOUNDARY_FLIPS, "off_by_one")
    is_int = isinstance(node, ast.Constant) and type(node.value) is int
    if is_int and node.value in (0, 1, 2) and hasattr(node, "end_col_offset"):
        yield Mutation("off_by_one", node.lineno, (_edit(lines, node, ast.Constant(node.value + 1)),))


def _negated_conditions(node: ast.AST, lines: list[str]) -> Iterator[Mutation]:
    if not isinstance(node, ast.If | ast.While | ast.IfExp):
        return
    test = node.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        negated: ast.expr = test.operand
    else:
        negated = ast.UnaryOp(op=ast.Not(), operand=test)
    yield Mutation("negate_condition", test.lineno, (_edit(lines, test, negated),))


def _swapped_returns(node: ast.AST, lines: list[str]) -> Iterator[Mutation]:
    """Swap the values of the first two distinct `return` statements of a function (not of nested functions)."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return
    values = [r.value for r in _own_returns(node) if r.value is not None]
    for first, second in zip(values, values[1:], strict=False):
        if ast.dump(first) != ast.dump(second):
            edits = (_edit(lines, first, second), _edit(lines, second, first))
            yield Mutation("swap_returns", first.lineno, edits)
            return


def _own_returns(function: ast.AST) -> Iterator[ast.Return]:
    for child in ast.iter_child_nodes(function):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(child, ast.Return):
            yield child
        yield from _own_returns(child)


MUTATORS: tuple[Callable[[ast.AST, list[str]], Iterator[Mutation]], ...] = (
    _op_flips, _off_by_one, _negated_conditions, _swapped_returns,
)


def _inside_functions(tree: ast.Module) -> Iterator[ast.AST]:
    """Nodes inside function bodies (module-level constants and class attributes are left alone), functions included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
            for statement in node.body:
                yield from ast.walk(statement)


def candidate_mutations(source: str) -> list[Mutation]:
    """Every mutation that applies to `source` and changes its AST, in source order, deduplicated."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    original = ast.dump(tree)
    found: dict[tuple, Mutation] = {}
    for node in _inside_functions(tree):
        for mutator in MUTATORS:
            for mutation in mutator(node, lines):
                key = (mutation.kind, mutation.edits)
                if key not in found and _changes_ast(source, mutation, original):
                    found[key] = mutation
    return sorted(found.values(), key=lambda m: (m.line, m.kind, [(e.start, e.end, e.text) for e in m.edits]))


def _changes_ast(source: str, mutation: Mutation, original_dump: str) -> bool:
    try:
        return ast.dump(ast.parse(apply_mutation(source, mutation))) != original_dump
    except SyntaxError:
        return False


def apply_mutation(source: str, mutation: Mutation) -> str:
    """`source` with the mutation's edits applied (edits are applied from the last to the first)."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def index(position: tuple[int, int]) -> int:
        return offsets[position[0] - 1] + position[1]

    text = source
    for edit in sorted(mutation.edits, key=lambda e: e.start, reverse=True):
        text = text[: index(edit.start)] + edit.text + text[index(edit.end):]
    return text
