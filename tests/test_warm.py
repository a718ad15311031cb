"""dashboard.serve's warm-up page: only its secret in ?warm= starts the draw processes and waits for them;
any other value changes nothing, and the parameter never stays in the address."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import cache, warm

TOKEN = "s3cret-token_of-dashboard-serve"


@pytest.fixture
def warmed(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(cache, "warm_draw_processes", lambda: calls.append(1) or 2)
    monkeypatch.setattr(warm, "_first_page_seen", True)  # the first page's start is tested below
    monkeypatch.setenv("BNN_SERVE_WARM_TOKEN", TOKEN)
    return calls


def visit(monkeypatch, params: dict) -> tuple[bool, dict]:
    monkeypatch.setattr(warm.st, "query_params", params)
    return warm.warm_up(), params


def test_the_serve_token_starts_the_draw_processes_once_per_page_and_leaves_the_address(monkeypatch, warmed):
    assert visit(monkeypatch, {"warm": TOKEN, "run": "abc"}) == (True, {"run": "abc"})
    assert warmed == [1]
    assert visit(monkeypatch, {"run": "abc"}) == (False, {"run": "abc"})  # no parameter: nothing
    assert warmed == [1]


def test_without_dashboard_serve_no_value_warms(monkeypatch, warmed):
    monkeypatch.delenv("BNN_SERVE_WARM_TOKEN")
    assert visit(monkeypatch, {"warm": TOKEN}) == (False, {})
    monkeypatch.setenv("BNN_SERVE_WARM_TOKEN", "")
    assert visit(monkeypatch, {"warm": ""}) == (False, {})  # an empty secret is no secret
    assert warmed == []


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # patched per example
@given(value=st.text(max_size=200) | st.sampled_from([TOKEN, TOKEN + "x", TOKEN[:-1], "", "-1", "x" * 100_000]))
def test_any_other_value_is_ignored_and_removed(monkeypatch, value):
    calls: list[int] = []
    with monkeypatch.context() as patch:
        patch.setattr(cache, "warm_draw_processes", lambda: calls.append(1))
        patch.setattr(warm, "_first_page_seen", True)
        patch.setenv("BNN_SERVE_WARM_TOKEN", TOKEN)
        params = {"warm": value}
        patch.setattr(warm.st, "query_params", params)
        assert warm.warm_up() is (value == TOKEN)
        assert params == {}
    assert calls == ([1] if value == TOKEN else [])


@pytest.mark.parametrize(
    "serving, classroom, started", [(True, "1", [1]), (True, "0", []), (True, "maybe", []), (False, "1", [])]
)
def test_a_classroom_servers_first_page_starts_the_draw_processes_and_waits_once(
    monkeypatch, serving, classroom, started
):
    from dashboard import streamlit_compat

    calls: list[int] = []
    monkeypatch.setattr(cache, "warm_draw_processes", lambda: calls.append(1) or 2)
    monkeypatch.setattr(streamlit_compat, "serving_browsers", lambda: serving)  # False: AppTest, the CLI
    monkeypatch.setattr(warm, "_first_page_seen", False)
    monkeypatch.setenv("BNN_CLASSROOM", classroom)  # "maybe" is refused: the pages that read it say so
    monkeypatch.delenv("BNN_SERVE_WARM_TOKEN", raising=False)
    assert visit(monkeypatch, {}) == (False, {})
    assert visit(monkeypatch, {"run": "abc"}) == (False, {"run": "abc"})  # once per process
    assert calls == started


def test_after_the_warm_up_page_no_student_page_waits_for_the_draw_processes(monkeypatch):
    """On dashboard.serve the warm-up page is each process's first: a later page (the class's, while the draw
    processes draw) must not wait for them again."""
    from dashboard import streamlit_compat

    calls: list[int] = []
    monkeypatch.setattr(cache, "warm_draw_processes", lambda: calls.append(1) or 2)
    monkeypatch.setattr(streamlit_compat, "serving_browsers", lambda: True)
    monkeypatch.setattr(warm, "_first_page_seen", False)
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    monkeypatch.setenv("BNN_SERVE_WARM_TOKEN", TOKEN)
    assert visit(monkeypatch, {"warm": TOKEN}) == (True, {})
    assert visit(monkeypatch, {"run": "abc"}) == (False, {"run": "abc"})
    assert visit(monkeypatch, {"warm": "guess"}) == (False, {})
    assert calls == [1]
