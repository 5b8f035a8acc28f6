"""Fixtures for the swe recipe: a tiny local project that ships its tests, and a store of tasks generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.swe.generator import generate

TINY_SOURCE = '''\
"""Small numeric helpers."""


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def total(items):
    result = 0
    for item in items:
        result = result + item
    return result


def is_even(number):
    return number % 2 == 0
'''
TINY_TESTS = '''\
from tinymath import clamp, is_even, total


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(12, 0, 10) == 10


def test_total():
    assert total([1, 2, 3]) == 6


def test_is_even():
    assert is_even(4) and not is_even(3)
'''


def write_tiny_project(root: Path) -> Path:
    """A pure-Python project with a module and its tests."""
    (root / "tests").mkdir(parents=True)
    (root / "tinymath.py").write_text(TINY_SOURCE)
    (root / "tests" / "test_tinymath.py").write_text(TINY_TESTS)
    return root


@pytest.fixture(scope="session")
def tiny_project(tmp_path_factory) -> Path:
    """The tiny project's source directory."""
    return write_tiny_project(tmp_path_factory.mktemp("src") / "tinymath")


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory, tiny_project) -> tuple[Path, list[dict]]:
    """A store with three instances generated from the tiny project."""
    store = tmp_path_factory.mktemp("store")
    return store, generate(str(tiny_project), store, count=3, seed=0)


def appended_checkout(store: Path, instance: dict, workdir: Path, appended: str,
                      fixed: bool = False) -> tuple[Path, str]:
    """A fresh checkout of `instance` under `workdir` (its bug fixed when `fixed`) with `appended` written at the end of
    the file its bug changed: (the checkout, that file)."""
    from recipes.swe.diffs import apply_patch, split_patch
    from recipes.swe.grader import checkout

    repo = checkout(store, instance, workdir / "repo")
    if fixed:
        apply_patch(repo, instance["patch"], reverse=True)
    changed = next(iter(split_patch(instance["patch"])))
    with (repo / changed).open("a") as handle:
        handle.write(appended)
    return repo, changed
