"""The classroom load test's command line and session placement, without a server."""

from __future__ import annotations

import pytest


def test_a_server_group_places_session_i_on_server_i_mod_n():
    from benchmarks.classroom.server import ServerGroup

    group = ServerGroup.__new__(ServerGroup)  # no processes: only the placement rule
    group.urls = ["http://a", "http://b", "http://c"]
    assert [group.url_of(i) for i in range(7)] == ["http://a", "http://b", "http://c"] * 2 + ["http://a"]
    assert group.url_of(-1) == "http://a"  # the teacher's page opens every server separately, the first here


def test_servers_outside_1_to_8_are_refused(capsys):
    from benchmarks.classroom_load import main

    for bad in ("0", "9", "-1"):
        with pytest.raises(SystemExit) as stop:
            main(["--servers", bad])
        assert stop.value.code == 2
        assert "--servers: 1 to 8" in capsys.readouterr().err


def test_proxy_processes_outside_1_to_8_or_beside_servers_are_refused(capsys):
    from benchmarks.classroom_load import main

    for argv, message in (
        (["--proxy-processes", "9"], "--proxy-processes: 1 to 8"),
        (["--proxy-processes", "-1"], "--proxy-processes: 1 to 8"),
        (["--proxy-processes", "2", "--servers", "2"], "give one of them"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        assert message in capsys.readouterr().err


def test_patience_outside_0_to_600_seconds_is_refused(capsys):
    from benchmarks.classroom_load import main

    for bad in ("0", "-1", "601", "nan", "inf"):
        with pytest.raises(SystemExit) as stop:
            main(["--patience", bad])
        assert stop.value.code == 2
        assert "--patience: more than 0 and at most 600 seconds" in capsys.readouterr().err


def test_moves_left_before_the_complete_numbers_are_counted_not_timed():
    from benchmarks.classroom.report import Interaction, Report, table
    from benchmarks.classroom.scenario import Scenario

    report = Report(Scenario(patience=3.0))
    report.interactions = [
        Interaction(1, "threshold", 0.1, True, complete_seconds=2.0),
        Interaction(2, "threshold", 0.1, True, complete_seconds=None, left=True),
        Interaction(3, "samples", 0.2, True, complete_seconds=None),  # never completed: infinitely slow
    ]
    assert report.summary(("threshold",), complete=True)["n"] == 1
    assert report.summary(("samples",), complete=True)["max"] == float("inf")
    text = table(report)
    assert "never completed: 1; left before the complete numbers (a student waits at most 3 s" in text
    assert "): 1 (1 slider moves);" in text
