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
