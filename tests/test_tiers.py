"""The tiers' markers set at collection (`tests/conftest.py`): a test using an end-to-end fixture is `e2e`, and an
`e2e` or integration-fixture test is `slow`, so `make test` (-m "not e2e") and `make test-fast` (-m "not slow")
leave them out without a marker of their own."""

from __future__ import annotations

import pytest

from tests.conftest import pytest_collection_modifyitems


class FakeItem:
    """What the hook reads of a collected test: its node id, fixtures and markers."""

    def __init__(self, nodeid: str, fixturenames: tuple[str, ...] = (), markers: tuple[str, ...] = ()) -> None:
        self.nodeid, self.fixturenames, self.markers = nodeid, fixturenames, set(markers)

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None

    def add_marker(self, marker) -> None:
        self.markers.add(marker.name)


@pytest.mark.parametrize(("fixtures", "markers", "expected"), [
    ((), (), set()),
    (("tmp_path",), (), set()),
    (("embedded_engine",), (), {"slow"}),
    (("prefect_api", "tmp_path"), (), {"e2e", "slow"}),
    ((), ("e2e",), {"e2e", "slow"}),
    ((), ("slow",), {"slow"}),
])
def test_markers_follow_the_fixtures(fixtures, markers, expected):
    item = FakeItem("tests/x/test_a.py::test_one", fixtures, markers)
    pytest_collection_modifyitems(None, [item])
    assert item.markers == expected
