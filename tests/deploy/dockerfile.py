"""Just enough Dockerfile parsing for the image checks: instructions, ARG defaults, and the rules the images keep."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

CONSTRAINTS = "constraints.txt"  # where every image copies deploy/constraints.txt


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    keyword: str  # upper-case keyword (FROM, RUN, ...)
    value: str  # the rest of the instruction
    line: int  # 1-based line number where it starts


def parse(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile (comments and blank lines dropped)."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        start = start if pending else number
        pending += " " + stripped.removesuffix("\\").strip() if pending else stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            keyword, _, value = pending.partition(" ")
            instructions.append(Instruction(keyword.upper(), value.strip(), start))
            pending = ""
    if pending:
        raise ValueError(f"line {start}: the last instruction ends with a line continuation")
    return instructions


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    """ARG NAME=VALUE defaults (quotes removed)."""
    defaults = {}
    for instruction in instructions:
        if instruction.keyword == "ARG" and "=" in instruction.value:
            name, _, value = instruction.value.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
    return defaults


def expand(value: str, variables: dict[str, str]) -> str:
    """Substitute ${NAME} and $NAME from `variables`; unknown names are left as they are."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)


def problems(text: str) -> list[str]:
    """What breaks the image rules: FROM first (after ARGs), pinned base images, constrained pip, non-root user."""
    instructions = parse(text)
    found: list[str] = []
    keywords = [i.keyword for i in instructions]
    if "FROM" not in keywords:
        return ["no FROM instruction"]
    if any(keyword != "ARG" for keyword in keywords[: keywords.index("FROM")]):
        found.append("only ARG may come before the first FROM")
    defaults = arg_defaults(instructions)
    for instruction in instructions:
        if instruction.keyword == "FROM":
            image = expand(instruction.value.split()[0], defaults)
            name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
            if "@sha256:" not in image and tag in ("", "latest"):
                found.append(f"line {instruction.line}: base image {image!r} is not pinned to a version")
        if instruction.keyword == "RUN" and "pip install" in instruction.value:
            for command in instruction.value.split("&&"):
                words = shlex.split(command)
                if "pip" in words and "install" in words and not _constrained(words):
                    found.append(f"line {instruction.line}: `{command.strip()}` lacks -c {CONSTRAINTS}")
    users = [i.value for i in instructions if i.keyword == "USER"]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        found.append("the image runs as root; end with USER <non-root uid>")
    return found


def _constrained(words: list[str]) -> bool:
    pairs = zip(words, words[1:], strict=False)
    return any(word in ("-c", "--constraint") and nxt.endswith(CONSTRAINTS) for word, nxt in pairs)
