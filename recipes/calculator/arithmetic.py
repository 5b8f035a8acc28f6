"""The calculator's arithmetic, pure: a small recursive-descent parser over exact fractions (never `eval`).

Grammar (whitespace anywhere between tokens):
    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/" | "×" | "÷") factor)*
    factor     := ("+" | "-") factor | number | "(" expression ")"
    number     := digits ["." digits]
Nothing else is accepted: no names, no calls, no exponents, no bit operations, no strings. Limits keep any input cheap:
at most MAX_LENGTH characters, MAX_DIGITS digits per number, MAX_DEPTH nested parentheses or signs; values are
`fractions.Fraction`, so sums and products of integers are exact. A refusal is `ExpressionError`, naming the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_LENGTH = 200  # characters of one expression
MAX_DIGITS = 30  # digits of one number (and of a result's integer part)
MAX_DEPTH = 20  # nested parentheses and unary signs
DECIMAL_PLACES = 12  # a non-integral result is rounded to this many places
TOKEN_RE = re.compile(r"[ \t\n]*(?:(?P<number>[0-9]+(?:\.[0-9]+)?)|(?P<op>[-+*/×÷()]))")
OPERATORS = {"×": "*", "÷": "/"}


class ExpressionError(ValueError):
    """An expression the calculator refuses; the message names what is wrong and what it accepts."""


@dataclass(frozen=True)
class Token:
    kind: str  # "number" or "op"
    text: str  # the number's digits, or the operator ("×" and "÷" read as "*" and "/")
    position: int  # index of its first character in the expression


def tokenize(expression: str) -> list[Token]:
    """The tokens of `expression`, or ExpressionError at the first character that is not arithmetic."""
    if len(expression) > MAX_LENGTH:
        raise ExpressionError(f"expression of {len(expression)} characters; the calculator takes at most "
                              f"{MAX_LENGTH}")
    tokens, position = [], 0
    while expression[position:].strip(" \t\n"):
        match = TOKEN_RE.match(expression, position)
        if match is None:
            rest = expression[position:]
            where = position + len(rest) - len(rest.lstrip(" \t\n"))
            raise ExpressionError(f"{expression[where]!r} at position {where} is not arithmetic: use numbers, "
                                  "+ - * / and parentheses, e.g. '317 * 46'")
        if (digits := match.group("number")) is not None:
            if sum(ch.isdigit() for ch in digits) > MAX_DIGITS:
                raise ExpressionError(f"number {digits[:12]}... has more than {MAX_DIGITS} digits")
            tokens.append(Token("number", digits, match.start("number")))
        else:
            op = match.group("op")
            tokens.append(Token("op", OPERATORS.get(op, op), match.start("op")))
        position = match.end()
    return tokens


@dataclass
class _Parser:
    """Recursive descent over `tokens`; `index` is the next token."""

    tokens: list[Token]
    index: int = 0

    def peek(self) -> Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take_op(self, ops: str) -> str | None:
        token = self.peek()
        if token is not None and token.kind == "op" and token.text in ops:
            self.index += 1
            return token.text
        return None

    def expression(self, depth: int) -> Fraction:
        value = self.term(depth)
        while (op := self.take_op("+-")) is not None:
            right = self.term(depth)
            value = value + right if op == "+" else value - right
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while (op := self.take_op("*/")) is not None:
            right = self.factor(depth)
            if op == "/" and right == 0:
                raise ExpressionError("division by zero")
            value = value * right if op == "*" else value / right
            _check_size(value)
        return value

    def factor(self, depth: int) -> Fraction:
        if depth > MAX_DEPTH:
            raise ExpressionError(f"more than {MAX_DEPTH} nested parentheses or signs")
        if (sign := self.take_op("+-")) is not None:
            value = self.factor(depth + 1)
            return -value if sign == "-" else value
        token = self.peek()
        if token is None:
            raise ExpressionError("the expression ends where a number was expected")
        if token.kind == "number":
            self.index += 1
            return Fraction(token.text)
        if self.take_op("(") is not None:
            value = self.expression(depth + 1)
            if self.take_op(")") is None:
                raise ExpressionError(f"'(' at position {token.position} is never closed")
            return value
        raise ExpressionError(f"{token.text!r} at position {token.position} where a number was expected")


def _check_size(value: Fraction) -> None:
    if abs(value) >= 10**MAX_DIGITS or value.denominator >= 10**MAX_DIGITS:
        raise ExpressionError(f"a result with more than {MAX_DIGITS} digits")


def evaluate(expression: str) -> Fraction:
    """The exact value of `expression`; ExpressionError for anything but arithmetic within the limits."""
    if not isinstance(expression, str):
        raise ExpressionError(f"the expression must be text, got {type(expression).__name__}")
    parser = _Parser(tokenize(expression))
    if parser.peek() is None:
        raise ExpressionError("empty expression: write one such as '317 * 46'")
    value = parser.expression(depth=0)
    if (left := parser.peek()) is not None:
        raise ExpressionError(f"unexpected {left.text!r} at position {left.position} after a complete expression")
    _check_size(value)
    return value


def format_number(value: Fraction) -> str:
    """An integer as its digits; anything else as a decimal rounded to DECIMAL_PLACES, trailing zeros dropped."""
    if value.denominator == 1:
        return str(value.numerator)
    rounded = round(value, DECIMAL_PLACES)
    sign = "-" if rounded < 0 else ""
    whole, fraction = divmod(abs(rounded.numerator) * 10**DECIMAL_PLACES // rounded.denominator, 10**DECIMAL_PLACES)
    digits = str(fraction).rjust(DECIMAL_PLACES, "0").rstrip("0")
    return f"{sign}{whole}.{digits}" if digits else f"{sign}{whole}"


def calculate(expression: str) -> str:
    """What the calculator tool answers: the formatted value of `expression` (ExpressionError when refused)."""
    return format_number(evaluate(expression))
