"""The costliest-first order of the test files (tests/file_order.py) that `make test` hands to its xdist workers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.file_order import COSTLIEST_FILES, costliest_first

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
