"""The shape of the run config: each section's keys with their type, default and one line of doc.

A section is a pydantic model (flows.config) or a component's own frozen dataclass used as it is (trainer.losses'
LossConfig, trainer.scheduling's ScheduleConfig...): its defaults and its field docstrings are the component's, so
every knob has one default, in one place. `options_model` derives a section from a component whose config also holds
what the run gives it (model paths, the other sections): the remaining fields, with the component's defaults and docs.
`unknown_key_error` names a key no section has, the section, and the valid keys.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import textwrap
import threading
import typing
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo


def is_section(annotation: Any) -> bool:
    """A pydantic model or a dataclass: a nested section (anything else is a value)."""
    return isinstance(annotation, type) and (issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation))


# CPython 3.11's ast module keeps its recursion-depth check per interpreter, not per thread: two threads parsing at
# once (ours and Prefect's, in a flow run) can fail with "SystemError: AST constructor recursion depth mismatch". Ours
# parse one at a time and retry that error; loading a config parses nothing (unknown_key_error reads only the keys).
_PARSE_LOCK = threading.Lock()
_PARSE_TRIES = 5


def _parse_class(klass: type) -> ast.stmt:
    """The class statement of `klass`'s source."""
    with _PARSE_LOCK:
        for attempt in range(_PARSE_TRIES):
            try:  # inspect.getsource parses the class's module too
                return ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
            except SystemError:
                if attempt == _PARSE_TRIES - 1:
                    raise
    raise AssertionError("unreachable")


@functools.cache  # parsed once per class
def field_docs(cls: type) -> dict[str, str]:
    """The one-line docstrings under a dataclass's fields (`x: int = 0` then `\"\"\"doc\"\"\"`), by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        body = _parse_class(klass)
        statements = body.body if isinstance(body, ast.ClassDef) else []
        for node, after in zip(statements, statements[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def section_fields(section: type) -> dict[str, tuple[Any, FieldInfo]]:
    """name -> (type, FieldInfo with the default and the description) of a section's keys, in declaration order."""
    if issubclass(section, BaseModel):
        return {name: (info.annotation, info) for name, info in section.model_fields.items()}
    hints, docs = typing.get_type_hints(section), field_docs(section)
    fields = {}
    for f in dataclasses.fields(section):
        if not f.init:
            continue
        if f.default_factory is not dataclasses.MISSING:
            info = Field(default_factory=f.default_factory, description=docs.get(f.name))
        else:
            info = Field(default=... if f.default is dataclasses.MISSING else f.default, description=docs.get(f.name))
        fields[f.name] = (hints[f.name], info)
    return fields


def section_keys(section: type) -> dict[str, Any]:
    """name -> type of a section's keys, in declaration order (no source parsed: see section_fields for the docs)."""
    if issubclass(section, BaseModel):
        return {name: info.annotation for name, info in section.model_fields.items()}
    hints = typing.get_type_hints(section)
    return {f.name: hints[f.name] for f in dataclasses.fields(section) if f.init}


def options_model(name: str, component: type, run_given: Collection[str]) -> type[BaseModel]:
    """A section (extra keys forbidden) of `component`'s dataclass fields except `run_given` (what the run sets):
    same types, defaults and docs. The component is then `component(**options.model_dump(), **run_given_values)`."""
    fields = section_fields(component)
    missing = sorted(set(run_given) - set(fields))
    if missing:
        raise ValueError(f"options_model({name}): {component.__name__} has no fields {missing}; "
                         f"its fields: {sorted(fields)}")
    knobs = {key: value for key, value in fields.items() if key not in run_given}
    model = create_model(name, __config__=ConfigDict(extra="forbid", frozen=True), **knobs)  # type: ignore[call-overload]
    model.__doc__ = f"{component.__name__} fields a profile sets (the run sets {', '.join(run_given)})."
    return model


def unknown_key_error(section: type, data: Any, where: str = "") -> str | None:
    """None when every key of `data` (a mapping, nested sections included) is a key of `section`; else a message
    naming the first unknown key, its section, a close match and the valid keys."""
    if not isinstance(data, Mapping):
        return None
    fields = section_keys(section)
    for key, value in data.items():
        if key not in fields:
            place = f"section {where!r}" if where else "the top level of the run config"
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return f"unknown key {key!r} in {place}: {hint}valid keys: {', '.join(fields)}"
        annotation = fields[key]
        if is_section(annotation):
            error = unknown_key_error(annotation, value, f"{where}.{key}" if where else key)
            if error:
                return error
    return None
