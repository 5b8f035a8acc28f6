"""One default per setting: walking every config class a run or a service reads, a field name that appears in two of
them with different defaults is either the same setting twice (a bug: the controller's concurrency was 8 in the run
config and 4 in the controller's) or two different settings that share a name, listed here with why."""

from __future__ import annotations

import dataclasses
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from controller.config import ControllerConfig
from flows.config import ControllerSection, RunConfig
from gateway.config import GatewayConfig

DIFFERENT_SETTINGS = {  # name -> why the classes holding it mean different things
    "dtype": "the torch backend's training dtype vs vLLM's serving dtype",
    "kind": "the backend's kind vs the engine's kind",
    "recorded_turns": "a run's choice (None: its recipe's) vs the gateway process's setting (off unless told)",
    "schedule": "the rollout schedule (async/sync) vs the backend's micro-batching",
    "startup_timeout_s": "the embedded engine's start-up vs vLLM's (a much larger model load)",
    "temperature": "verl's removed option (None) vs the gateway's sampling temperature",
    "work_dir": "the run directories vs the controller's attempt directories",
}


def _default(field_default: typing.Any, factory: typing.Any, missing: typing.Any) -> typing.Any:
    if field_default is not missing:
        return field_default
    return factory() if factory not in (None, dataclasses.MISSING) else missing


def fields(cls: type) -> list[tuple[str, typing.Any, typing.Any]]:
    """(name, default or a missing marker, annotation) of a pydantic model's or a dataclass's fields."""
    if issubclass(cls, BaseModel):
        return [(name, _default(f.default, f.default_factory, PydanticUndefined), f.annotation)
                for name, f in cls.model_fields.items()]
    return [(f.name, _default(f.default, f.default_factory, dataclasses.MISSING), f.type)
            for f in dataclasses.fields(cls)]


def config_classes(*roots: type) -> set[type]:
    """Every pydantic model and dataclass reachable from `roots` through field annotations."""
    seen: set[type] = set()
    todo = list(roots)
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for _, _, annotation in fields(cls):
            for arg in typing.get_args(annotation) or (annotation,):
                if isinstance(arg, type) and (issubclass(arg, BaseModel) or dataclasses.is_dataclass(arg)):
                    todo.append(arg)
    return seen


def defaults_by_name(classes: set[type]) -> dict[str, dict[str, typing.Any]]:
    found: dict[str, dict[str, typing.Any]] = {}
    for cls in classes:
        for name, default, _ in fields(cls):
            if default not in (PydanticUndefined, dataclasses.MISSING):
                found.setdefault(name, {})[cls.__name__] = default
    return found


def test_no_setting_has_two_defaults():
    classes = config_classes(RunConfig, ControllerConfig, GatewayConfig)
    assert ControllerSection in classes and len(classes) > 10
    clashes = {name: by_class for name, by_class in defaults_by_name(classes).items()
               if len({repr(value) for value in by_class.values()}) > 1}
    unexplained = {name: by_class for name, by_class in clashes.items() if name not in DIFFERENT_SETTINGS}
    assert not unexplained, f"one setting, several defaults: {unexplained}; give it one default (or explain here)"
    assert set(DIFFERENT_SETTINGS) <= set(clashes), "an entry of DIFFERENT_SETTINGS no longer clashes: remove it"


def test_the_run_and_the_controller_share_the_concurrency_default():
    assert RunConfig(recipe="swe").controller.concurrency == ControllerConfig().concurrency == 8


def test_the_walk_catches_a_second_default():
    @dataclasses.dataclass
    class Twice:
        concurrency: int = 4

    assert defaults_by_name(config_classes(ControllerConfig, Twice))["concurrency"] == {
        "ControllerConfig": 8, "Twice": 4}
