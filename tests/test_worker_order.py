"""tests/conftest.py's queue for the 2 pytest-xdist workers: the serving group first, then the units
holding slow tests (most first), then the fast ones (largest first); a group's tests stay together; xdist's own
reordering by unit size is switched off so that this order is the one the workers get."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import conftest


class FakeItem:
    def __init__(self, nodeid: str, *marks: str, group: str | None = None):
        self.nodeid = nodeid
        self.marks = [getattr(pytest.mark, name).mark for name in marks]
        if group is not None:
            self.marks.append(pytest.mark.xdist_group(group).mark)
        self._fixtureinfo = None

    def get_closest_marker(self, name: str):
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, marker) -> None:
        self.marks.append(marker.mark)


def test_serving_first_then_slow_units_by_their_slow_count_then_fast_ones():
    items = [
        FakeItem("a.py::fast_alone"),
        FakeItem("b.py::browser", "browser", "slow"),
        FakeItem("c.py::fast_in_group", group="c"),
        FakeItem("d.py::slow_alone", "slow"),
        FakeItem("e.py::two_slow_1", "slow", group="e"),
        FakeItem("c.py::slow_in_group", "slow", group="c"),
        FakeItem("f.py::load", "load", "slow"),
        FakeItem("e.py::two_slow_2", "slow", group="e"),
        FakeItem("g.py::fast_alone"),
        FakeItem("h.py::fast_1", group="h"),
        FakeItem("h.py::fast_2", group="h"),
    ]
    conftest._group_for_workers(items)
    assert [item.nodeid for item in items] == [
        "b.py::browser",
        "f.py::load",
        "e.py::two_slow_1",
        "e.py::two_slow_2",
        "c.py::fast_in_group",
        "c.py::slow_in_group",
        "d.py::slow_alone",
        "h.py::fast_1",  # fast units: the larger first
        "h.py::fast_2",
        "a.py::fast_alone",
        "g.py::fast_alone",
    ]
    assert [conftest._unit_of(item) for item in items[:2]] == [conftest.SERVING_GROUP] * 2
    assert conftest._unit_of(items[-1]) == "g.py::fast_alone"  # no group: the test is its own unit


def test_xdist_keeps_the_queue_order():
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True))
    conftest.pytest_configure(config)
    assert config.option.loadscopereorder is False
    without_xdist = SimpleNamespace(option=SimpleNamespace())
    conftest.pytest_configure(without_xdist)  # no such option: nothing to change
    assert not hasattr(without_xdist.option, "loadscopereorder")
