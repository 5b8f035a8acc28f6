"""The costliest-first order of the test files (tests/file_order.py) that `make test` hands to its xdist workers."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.file_order import COSTLIEST_FILES, SHARED_FIXTURE_FILES, costliest_first, work_unit

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Collected:
    nodeid: str


def test_listed_files_come_first_in_list_order_and_everything_else_keeps_its_order():
    items = [Collected(n) for n in ("tests/a.py::t1", "tests/b.py::t1", "tests/c.py::t[1]", "tests/a.py::t2",
                               "tests/c.py::t[2]", "tests/d.py::T::t")]
    ordered = costliest_first(items, costliest=("tests/c.py", "tests/b.py"))
    assert [t.nodeid for t in ordered] == ["tests/c.py::t[1]", "tests/c.py::t[2]", "tests/b.py::t1",
                                           "tests/a.py::t1", "tests/a.py::t2", "tests/d.py::T::t"]


def test_every_listed_file_exists_once():
    """A renamed or split file must be renamed here too, or it silently loses its place at the front."""
    missing = [path for path in COSTLIEST_FILES if not (ROOT / path).is_file()]
    assert not missing, f"{missing} listed in tests/file_order.py COSTLIEST_FILES do not exist: update the list"
    assert len(set(COSTLIEST_FILES)) == len(COSTLIEST_FILES)


def fixture_users(fixture: str) -> set[str]:
    """Test files with a function (a test or a fixture) taking `fixture` as an argument."""
    users = set()
    for path in (ROOT / "tests").rglob("*.py"):
        if fixture not in (text := path.read_text()):
            continue
        functions = [node for node in ast.walk(ast.parse(text))
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
        if any(arg.arg == fixture for node in functions for arg in node.args.args) and path.name != "conftest.py":
            users.add(str(path.relative_to(ROOT)))
    return users


def test_files_of_a_shared_server_fixture_are_one_work_unit_and_every_user_is_listed():
    """A file that uses the fixture but is not listed starts its own server on whichever worker takes it."""
    for fixture, listed in SHARED_FIXTURE_FILES.items():
        users = fixture_users(fixture)
        assert users == set(listed), f"files using {fixture}: {sorted(users)}; SHARED_FIXTURE_FILES lists {listed}"
        assert {work_unit(f"{path}::test_x[1]") for path in listed} == {fixture}
    assert work_unit("tests/a.py::T::t") == "tests/a.py"


def test_the_suites_scheduler_splits_work_by_unit():
    """The conftest hook's scheduler class (what `make test`'s `--dist loadfile` uses) splits by `work_unit`."""
    from tests.conftest import shared_fixture_scheduling

    scheduling = shared_fixture_scheduling()
    path = SHARED_FIXTURE_FILES["mlflow_server"][0]
    assert scheduling._split_scope(None, f"{path}::test_a") == "mlflow_server"
    assert scheduling._split_scope(None, "tests/a.py::test_a") == "tests/a.py"
