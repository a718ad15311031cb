"""Classroom protections turn themselves on when the server is reachable from other machines
(Streamlit's server.address unset or not loopback), unless BNN_CLASSROOM says otherwise; the log and
the teacher are told why."""

from __future__ import annotations

import logging

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import settings
from tests.test_dashboard_app import APP, TIMEOUT, fresh_caches  # noqa: F401


@pytest.mark.parametrize(
    "address, reachable",
    [
        (None, False),  # no server in this process (AppTest, the command line)
        ("", True),  # Streamlit's default: every interface
        ("0.0.0.0", True),
        ("::", True),
        ("192.168.1.20", True),
        ("[2001:db8::1]", True),
        ("class-server.local", True),
        ("127.0.0.1", False),
        ("127.0.1.1", False),
        ("::1", False),
        ("[::1]", False),
        ("localhost", False),
        ("LocalHost", False),
    ],
)
def test_which_addresses_other_machines_reach(address, reachable):
    assert settings.listens_beyond_loopback(address) is reachable


@pytest.fixture
def unset(monkeypatch):
    monkeypatch.delenv(settings.CLASSROOM_VARIABLE, raising=False)
    monkeypatch.setattr(settings, "_secrets", lambda: {})
    monkeypatch.setattr(settings, "_said", [])
    return monkeypatch


@pytest.mark.parametrize(
    "variable, address, on",
    [
        (None, "", True),
        (None, "0.0.0.0", True),
        (None, "127.0.0.1", False),
        (None, None, False),
        ("0", "0.0.0.0", False),  # the teacher's explicit choice wins
        ("1", "127.0.0.1", True),
        ("1", None, True),
    ],
)
def test_classroom_mode_follows_the_address_unless_set(unset, variable, address, on):
    if variable is not None:
        unset.setenv(settings.CLASSROOM_VARIABLE, variable)
    unset.setattr(settings, "server_address", lambda: address)
    assert settings.classroom_mode() is on
    notice = settings.classroom_notice()
    assert (notice is not None) == (on and variable is None)
    if notice:
        assert "0.0.0.0" in notice or "every interface" in notice
        assert f"{settings.CLASSROOM_VARIABLE}=0" in notice


def test_the_log_says_once_why(unset, caplog):
    unset.setattr(settings, "server_address", lambda: "0.0.0.0")
    with caplog.at_level(logging.INFO, logger="dashboard.settings"):
        for _ in range(3):
            assert settings.classroom_mode()
    lines = [r.getMessage() for r in caplog.records if "classroom protections" in r.getMessage()]
    assert len(lines) == 1 and "ON" in lines[0] and "0.0.0.0" in lines[0]


def test_a_reachable_server_protects_runs_and_tells_the_teacher(unset, tmp_path):
    unset.setenv("BNN_CACHE_DIR", str(tmp_path))
    unset.setattr(settings, "server_address", lambda: "0.0.0.0")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception
    captions = [c.value for c in at.caption]
    assert any("Classroom protections are on because this server listens on 0.0.0.0" in c for c in captions)
    assert any(e.label == "Teacher" for e in at.expander)
