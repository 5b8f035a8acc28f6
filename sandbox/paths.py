"""What a Python program needs bound read-only to run in a sandbox: its interpreter, its venv, its code."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path


def interpreter_paths() -> tuple[Path, ...]:
    """This interpreter's installation and its venv (resolved: symlinks point into them)."""
    found: dict[Path, None] = {}
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        found[Path(prefix).resolve()] = None
    return tuple(found)


def package_dir(module: str) -> Path:
    """The directory of `module`'s top-level package (bind it to make `python -m module` importable)."""
    top = module.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{top!r} is not an importable package; cannot bind the code of {module!r}")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def sandbox_package_dir() -> Path:
    """This package's directory (a harness that sandboxes its own commands imports it)."""
    return Path(__file__).resolve().parent


def module_closure(module: str) -> tuple[Path, ...]:
    """The source files `python -m module` runs from its own source tree: the module, every module of that tree it
    imports (anywhere in the file, transitively; packages' `__init__.py` included), nothing else of the tree.

    "Its own source tree" is the directory holding the module's top-level package; imports resolving elsewhere (the
    standard library, site-packages) are the interpreter's and bound with it.
    """
    root = package_dir(module).parent
    found: dict[Path, None] = {}
    pending = [module]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for file, is_package in _own_files(name, root):
            if file in found:
                continue
            found[file] = None
            pending += _imports(file, name if is_package else name.rpartition(".")[0])
    return tuple(found)


def _own_files(module: str, root: Path) -> list[tuple[Path, bool]]:
    """The files of `module` and of each package above it, when they live under `root`."""
    parts = module.split(".")
    files = []
    for depth in range(1, len(parts) + 1):
        base = root.joinpath(*parts[:depth])
        if (base / "__init__.py").is_file():
            files.append(((base / "__init__.py").resolve(), True))
        elif base.with_suffix(".py").is_file() and depth == len(parts):
            files.append((base.with_suffix(".py").resolve(), False))
        elif not base.is_dir():  # a directory without __init__.py is a namespace package: nothing to bind
            return files if depth > 1 else []
    return files


def _imports(file: Path, package: str) -> list[str]:
    """Module names `file` imports (absolute, relative ones resolved against `package`), with `from x import y`
    also as `x.y` (y may be a submodule)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return [name for name in names if name]
